/*
 * fastcdc.c -- the content-defined cutter: FastCDC (Xia et al., USENIX
 * ATC'16, and the 2020 TPDS version), as format/chunker.md specifies it.
 *
 * A block starting at byte s ends after byte e = s + l - 1 for the first
 * length l in [min, max) where the gear hash of the 64 bytes ending at e,
 *
 *     H(e) = sum over k = 0..63 of G[byte e - k] * 2^k   (mod 2^64),
 *
 * has every bit of the mask zero: the harder mask (more bits) below the
 * average length, the easier one from it on -- normalized chunking, level
 * 2, which pulls lengths towards the average -- else at max, else at the
 * image's end.  G is a fixed table of 256 64-bit entries, each from
 * SHA-256 of a fixed string and its index (§2), compiled in below and
 * checked against that rule by the tests, so that two stores cut the same
 * bytes the same way, forever.  Masks are contiguous bits just below bit
 * 63 (§3): the bits that depend on the most bytes, and bit 63 is never
 * tested, which the two-bytes step needs.
 *
 * Speed (§4, "two bytes at a time", from the TPDS version): the hash of
 * the first byte of a pair is tested shifted left by one, against the
 * mask shifted left by one: fp = (fp << 2) + 2G[a] is 2 H(a), and
 * fp + G[b] is H(b).  The same cut points as one byte a step, half the loop overhead.
 * Nothing before s + min - 64 is read at all: a quarter of the bytes.
 *
 * The hash starts from zero 64 bytes before the first candidate, so each
 * candidate's hash is the full window's: where a block ends depends on
 * its own last 64 bytes only, never on where the previous block ended
 * (beyond min), and a run of zeros has the same hash everywhere -- one
 * that matches no mask (bit 62 of -G[0] is set): an all-zero block
 * inside a long run of zeros is max bytes long.
 */
#include "dedup.h"
#include "chunk/chunk.h"

#define DD_GEAR_WINDOW 64

/* G[i]: the first 8 bytes, little-endian, of SHA-256 of the 21 ASCII
 * bytes "libdedup fastcdc gear" followed by the byte i (format/
 * chunker.md §2; SHA-256 of the whole table, entries little-endian:
 * 784ea012 4abc094c ...). */
static const uint64_t dd_gear[256] = {
	0x3cad5580e930ac6fu, 0x96a6f86020106afeu, 0x815478f1e6892a17u,
	0x3623676fdf8ab33au, 0xc68e5d2a81e239b2u, 0xbaa5054d23afa6a3u,
	0xd755ffccac24b80cu, 0x07908044b30af13cu, 0xce3aed649a8fe4beu,
	0xefff6b69df22a8efu, 0xf59948a1be3a5004u, 0xcb9ecde8f0100b5eu,
	0xa19a446fdf579bcfu, 0x381bb98e5ba61527u, 0x022df86788666c13u,
	0x0b64c3ea04c226eeu, 0xe443bc15b61728b6u, 0xa92ce54a677463a7u,
	0x28acfe2592c15671u, 0xfd67c6336717aa7du, 0x864d7482b3178ab3u,
	0x9cb8c85363938de8u, 0x805eeabb9ac06bc8u, 0xf23f62e371a6edd5u,
	0x2d3b93e3a67f27bcu, 0x1ded85c1edcf8042u, 0x91e07b4a472183f4u,
	0x091eb3306705c22eu, 0xb50bc0b5c9967dc4u, 0xfdb93f2d2f55fe25u,
	0x9f2f97a65b3c20efu, 0x908831954f21ac88u, 0xc108f9bf3fe1a1bdu,
	0x3114792ef2d6b2c9u, 0x71d5ba3d8d753ab9u, 0xd025a2c09a2b6e44u,
	0x1c02163fe8e79551u, 0x4b95a9740785cedeu, 0x09a7ac9659641c66u,
	0x682e99723bdb71dcu, 0x723b8ef476104e0du, 0x12d2e05d3aa4bf49u,
	0xbfee2d0c467fd582u, 0xc5e964f5ad27f867u, 0x11b03d1074106543u,
	0x8e1c3f10e0e97ea5u, 0x7c14200fc0200301u, 0x90c700907354f10bu,
	0x4a550f4ac5a90fa3u, 0x5544c1ffb77ca3d4u, 0x5285c5e6e4c20cebu,
	0x0564d968be2cb6e2u, 0x60919571738e6076u, 0x9e2b24aeda44aa05u,
	0x1b4ed3c3feb7acaeu, 0x10ce347531abce25u, 0xd6068d59e65557fcu,
	0xf439c832ecbba12bu, 0xff9af2a3c226e058u, 0x6da37a56541ebac5u,
	0x23873106e7c08421u, 0xc31c456e3dd0457cu, 0x1645a2f9a419782cu,
	0x062d24db8ec8b472u, 0x8a43ba703ef7c001u, 0xff623d4de72dae46u,
	0x88d606a6bd8438c7u, 0xb5edfaba1d37212fu, 0x1c718cfca386e29eu,
	0xb4bd727903051b59u, 0x7efa85e913654c15u, 0xd852078c2e5f2b0cu,
	0x7bb74ffb6942cedeu, 0x9b35aa8eb3f965efu, 0x0a3fb1e79efc7532u,
	0x7b9e5bbb234f5f43u, 0x74aeb846b8f72297u, 0xd638a6751727e6fcu,
	0xa6732797c0beb19fu, 0xd0124df1505727dfu, 0xc4102f1316a21b07u,
	0x2529e25d2fcd27a2u, 0xe8dfef2fb546c852u, 0xbb44ca323f59e08cu,
	0xf05050b9da948136u, 0x0e85f0502f90f2f3u, 0x1694fc91e7f0e372u,
	0x48184e2ea5729e98u, 0x2579ee614cb2e8fbu, 0x8904d086bc29c497u,
	0x8d4cfcb218b85b58u, 0x6b33a2565e06f0b5u, 0xb50a5fafcca894fbu,
	0xe6c94a3586109ddeu, 0x5ab07a1c4e2d105eu, 0x012643c29e20ce66u,
	0xf088718fcb380c9du, 0x93f8fb1191aed0d5u, 0x95a56496f0f5a5a1u,
	0x54e1f1cde5fa7dddu, 0x96669c5e45bca052u, 0x54c613aea608449eu,
	0xf100b7867674bd08u, 0xa444d6ca1afb348du, 0x8feac87cdf114404u,
	0xfdd084ffe43b253du, 0xc0c3ce282aa484f3u, 0xbd4925fbe98c90d3u,
	0xc56402a46e40e15eu, 0x63136154e2d71718u, 0x0166073b2bc17cafu,
	0xd269c85d6b3752b3u, 0x5832afafc9efb3d6u, 0x315b13166b21335eu,
	0xba301192afafb8beu, 0x801b37a3950b4cceu, 0x5bb24deacf910adfu,
	0x94f57db2908b20fdu, 0x2c5fe37e8265be70u, 0x4fbc774d6a34d904u,
	0x4d279b62e33b3ed3u, 0xacab885c297fd91bu, 0xdf292139d5c41351u,
	0x7b10cdde7b07015fu, 0x89a1d251992ba419u, 0xbbd48f4660958c2au,
	0xc7d3706159e8de96u, 0x91bd0555c6bac2ccu, 0x2015e45d7d5bc3d6u,
	0x9b788f2bc24b05e5u, 0xec23f7f7a170c490u, 0x4745ec6bcb1be1aeu,
	0xf4116bac306add64u, 0x8f72fe821bad096du, 0x33288a14d1a95a33u,
	0x3aaf52e5ecdc05b3u, 0x7cd5e38c6605951au, 0x939e01dbc736f14au,
	0x17aaea4e3f74d8b9u, 0x3b0c77ddb0143f4du, 0xe52cc106e6766668u,
	0x7b25a8e9ca4f631fu, 0x9f4ab5715892001bu, 0xd1c38cb9b9bc8496u,
	0xeb227d3561cce3b4u, 0xb9f8825b54f6dfd6u, 0x4a9863a3e19a6d8au,
	0x4c17dd18ce02e4c4u, 0x9fdbba44b348a7d0u, 0x2c64e62259c6e9b9u,
	0xc21c8019a7c62dc5u, 0xef9ee09ee792cf22u, 0xcbe4f7c3ad55b486u,
	0xdce4cc03cf32786du, 0x8baa17052bce5e1fu, 0xd9893cccd3ddaf74u,
	0xf33ba304b026aafdu, 0x940cf89c907e5774u, 0x7d5b891406dedbf5u,
	0xa97aeed7d01a9ecdu, 0x0450b7d2ae4647f8u, 0x813c8bcebd5dbf7du,
	0xf1a774529560b866u, 0xc35969a7b0d94e73u, 0x16dfc662fbb8c0c7u,
	0x57645731c3e0f986u, 0x13a4fbcef3c943d8u, 0xddc1f75e1f20e3abu,
	0x641aa1867d44d61fu, 0xd1f342c97adb2e2du, 0xcfd074d4c0c8aa24u,
	0x5afd6aea793a5ad7u, 0x8efd39bea6443471u, 0xe5580c6b8282379fu,
	0x69a4c4f9b4d31fc4u, 0x8d87fea874c8f529u, 0x95045d6a2612b548u,
	0xc815d8d092d21070u, 0x832a67065312e4dau, 0x3baf9fbcffeae625u,
	0x41466710d6ed8c11u, 0x52822bffe96ef396u, 0x39d8e604ebb554b8u,
	0x36a9221d9f6ce3ceu, 0x5358ed61ce536a60u, 0x286d5eda8b6d18b5u,
	0x7fc1a076fea0668fu, 0x14f5135fdb3e61f6u, 0xb96de600620f2ea4u,
	0x5c3e9224f8f83a34u, 0x12c9fe284cb320c4u, 0xb41a6f943e10c93bu,
	0x632977bb65929591u, 0xba4468fd9096f811u, 0x688cd97a880244ccu,
	0xdc5d60cf5a69d8bdu, 0x180806e4660c6647u, 0xb5308ad62859a78bu,
	0x1c410901f1a80bdau, 0x1e776df508f4118cu, 0xa8e8331569ef5b1eu,
	0x629bfdcd55f1457fu, 0xb96ae3c716c32c46u, 0xf5c6bf9216e694eau,
	0x7d4ce0d694e80fd8u, 0xb1ab434806cb9fc4u, 0x222b33556fc215a3u,
	0x3fa04e47144cf93au, 0x2d124fc9dcf685a2u, 0x53d017bc28fcdd95u,
	0xb9e90813a9b98a14u, 0xf127a2a685f576dcu, 0x4443f68d92f4867au,
	0x728b56f3faadcfccu, 0x756b6d24d6acfd3du, 0x52c8e3e482e11735u,
	0x896bb18d76248d8au, 0x680eaf9fea494234u, 0x63362be598a7124bu,
	0xa31c4ba49a2bf921u, 0xf36aacc6c9343ee8u, 0x2952b6c5273d59a8u,
	0x467f6a5c4229d535u, 0xa212c4ff08d74544u, 0x694b2227a8d9189au,
	0x72cba281982c76b1u, 0xdc6277e4dd5dfe19u, 0xf1bdc5b9cd54351du,
	0xe4ef8f9ba43cd0adu, 0x70acc6bf71eaee46u, 0xd68acde7073249a7u,
	0x686482555fbb1365u, 0x369589f0fab8b887u, 0xd64f0e5d263f3bd7u,
	0x6f52251403693c26u, 0x17c00b5cbcd02ba5u, 0x31dd80c31951df3fu,
	0x9b49893ac5e12e0au, 0x927fb2c2f7e6621eu, 0x24f489dac9e2b27au,
	0x6101ec7c6f59b818u, 0xf63dc3ceef31be4cu, 0x9cac0b245e049c16u,
	0xcadf6958ed25ebe5u, 0xf0712af02eb6e193u, 0x14b2bb9faf6f760fu,
	0x70420bfee28dbe49u, 0x75a6731a2f9b0cb9u, 0xf7ad0c2ebf21d011u,
	0x575ed1d458553020u, 0xa2756e765d056edau, 0x4fb2cbbd6b97a075u,
	0x45872cb6772f32c5u, 0xbdfd904fc15f71c3u, 0x7b7da0f14e2f003au,
	0xc2966f35244f3b47u,
};

const uint64_t *dd_fastcdc_gear(void)
{
	return dd_gear;
}

/* Tests candidate lengths from..to (from <= to + 1) of the block at p
 * with mask m, two bytes a step; *fpp is H of the byte before length
 * `from`'s last.  Returns the first length that matches, or 0 with *fpp
 * H of byte to - 1. */
static inline size_t dd_gear_scan(const uint8_t *p, size_t from, size_t to,
				  uint64_t m, uint64_t *fpp)
{
	const uint64_t mls = m << 1;
	uint64_t fp = *fpp;
	size_t l = from;

	for (; l < to; l += 2) {
		fp = (fp << 2) + (dd_gear[p[l - 1]] << 1);
		if (!(fp & mls))
			return l;
		fp += dd_gear[p[l]];
		if (!(fp & m))
			return l + 1;
	}
	if (l == to) {
		fp = (fp << 1) + dd_gear[p[l - 1]];
		if (!(fp & m))
			return l;
	}
	*fpp = fp;
	return 0;
}

static size_t dd_cut_fastcdc(const dd_cutter *c, const uint8_t *p,
			     size_t len, bool final)
{
	size_t min = c->cu_min, avg = c->cu_avg, max = c->cu_max;
	/* the longest length tested: max itself needs no test */
	size_t stop = len < max ? len : max - 1, l = 0;
	uint64_t fp = 0;

	if (len >= min) {
		for (size_t j = min - DD_GEAR_WINDOW; j < min - 1; j++)
			fp = (fp << 1) + dd_gear[p[j]];
		l = dd_gear_scan(p, min, stop < avg - 1 ? stop : avg - 1,
				 c->cu_mask_s, &fp);
		if (!l && stop >= avg)
			l = dd_gear_scan(p, avg, stop, c->cu_mask_l, &fp);
	}
	if (l)
		return l;
	if (len >= max)
		return max;
	return final ? len : 0;
}

/* Bits 62 down to 63 - n. */
static uint64_t dd_gear_mask(unsigned n)
{
	return (((uint64_t)1 << n) - 1) << (63 - n);
}

void dd_cutter_fastcdc(dd_cutter *c, uint32_t avg)
{
	unsigned bits = 0;

	while (((uint32_t)1 << (bits + 1)) <= avg)
		bits++;
	*c = (dd_cutter){
		.cu_next = dd_cut_fastcdc,
		.cu_min = avg / 4,
		.cu_max = avg * 4,
		.cu_reads = true,
		.cu_avg = avg,
		.cu_mask_s = dd_gear_mask(bits + 2),
		.cu_mask_l = dd_gear_mask(bits - 2),
	};
}
