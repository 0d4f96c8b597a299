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
 * mask shifted left by one, with a table of the entries shifted left by
 * one (dd_gear_ls): fp = (fp << 2) + 2G[a] is 2 H(a), and fp + G[b] is
 * H(b).  The same cut points as one byte a step, half the loop overhead.
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
static const uint64_t dd_gear_ls[256] = {
	0x795aab01d26158deu, 0x2d4df0c04020d5fcu, 0x02a8f1e3cd12542eu,
	0x6c46cedfbf156674u, 0x8d1cba5503c47364u, 0x754a0a9a475f4d46u,
	0xaeabff9958497018u, 0x0f2100896615e278u, 0x9c75dac9351fc97cu,
	0xdffed6d3be4551deu, 0xeb3291437c74a008u, 0x973d9bd1e02016bcu,
	0x433488dfbeaf379eu, 0x7037731cb74c2a4eu, 0x045bf0cf10ccd826u,
	0x16c987d409844ddcu, 0xc887782b6c2e516cu, 0x5259ca94cee8c74eu,
	0x5159fc4b2582ace2u, 0xfacf8c66ce2f54fau, 0x0c9ae905662f1566u,
	0x397190a6c7271bd0u, 0x00bdd5773580d790u, 0xe47ec5c6e34ddbaau,
	0x5a7727c74cfe4f78u, 0x3bdb0b83db9f0084u, 0x23c0f6948e4307e8u,
	0x123d6660ce0b845cu, 0x6a17816b932cfb88u, 0xfb727e5a5eabfc4au,
	0x3e5f2f4cb67841deu, 0x2110632a9e435910u, 0x8211f37e7fc3437au,
	0x6228f25de5ad6592u, 0xe3ab747b1aea7572u, 0xa04b45813456dc88u,
	0x38042c7fd1cf2aa2u, 0x972b52e80f0b9dbcu, 0x134f592cb2c838ccu,
	0xd05d32e477b6e3b8u, 0xe4771de8ec209c1au, 0x25a5c0ba75497e92u,
	0x7fdc5a188cffab04u, 0x8bd2c9eb5a4ff0ceu, 0x23607a20e820ca86u,
	0x1c387e21c1d2fd4au, 0xf828401f80400602u, 0x218e0120e6a9e216u,
	0x94aa1e958b521f46u, 0xaa8983ff6ef947a8u, 0xa50b8bcdc98419d6u,
	0x0ac9b2d17c596dc4u, 0xc1232ae2e71cc0ecu, 0x3c56495db489540au,
	0x369da787fd6f595cu, 0x219c68ea63579c4au, 0xac0d1ab3ccaaaff8u,
	0xe8739065d9774256u, 0xff35e547844dc0b0u, 0xdb46f4aca83d758au,
	0x470e620dcf810842u, 0x86388adc7ba08af8u, 0x2c8b45f34832f058u,
	0x0c5a49b71d9168e4u, 0x148774e07def8002u, 0xfec47a9bce5b5c8cu,
	0x11ac0d4d7b08718eu, 0x6bdbf5743a6e425eu, 0x38e319f9470dc53cu,
	0x697ae4f2060a36b2u, 0xfdf50bd226ca982au, 0xb0a40f185cbe5618u,
	0xf76e9ff6d2859dbcu, 0x366b551d67f2cbdeu, 0x147f63cf3df8ea64u,
	0xf73cb776469ebe86u, 0xe95d708d71ee452eu, 0xac714cea2e4fcdf8u,
	0x4ce64f2f817d633eu, 0xa0249be2a0ae4fbeu, 0x88205e262d44360eu,
	0x4a53c4ba5f9a4f44u, 0xd1bfde5f6a8d90a4u, 0x768994647eb3c118u,
	0xe0a0a173b529026cu, 0x1d0be0a05f21e5e6u, 0x2d29f923cfe1c6e4u,
	0x90309c5d4ae53d30u, 0x4af3dcc29965d1f6u, 0x1209a10d7853892eu,
	0x1a99f9643170b6b0u, 0xd66744acbc0de16au, 0x6a14bf5f995129f6u,
	0xcd92946b0c213bbcu, 0xb560f4389c5a20bcu, 0x024c87853c419cccu,
	0xe110e31f9670193au, 0x27f1f623235da1aau, 0x2b4ac92de1eb4b42u,
	0xa9c3e39bcbf4fbbau, 0x2ccd38bc8b7940a4u, 0xa98c275d4c10893cu,
	0xe2016f0cece97a10u, 0x4889ad9435f6691au, 0x1fd590f9be228808u,
	0xfba109ffc8764a7au, 0x81879c50554909e6u, 0x7a924bf7d31921a6u,
	0x8ac80548dc81c2bcu, 0xc626c2a9c5ae2e30u, 0x02cc0e765782f95eu,
	0xa4d390bad66ea566u, 0xb0655f5f93df67acu, 0x62b6262cd64266bcu,
	0x746023255f5f717cu, 0x00366f472a16999cu, 0xb7649bd59f2215beu,
	0x29eafb65211641fau, 0x58bfc6fd04cb7ce0u, 0x9f78ee9ad469b208u,
	0x9a4f36c5c6767da6u, 0x595710b852ffb236u, 0xbe524273ab8826a2u,
	0xf6219bbcf60e02beu, 0x1343a4a332574832u, 0x77a91e8cc12b1854u,
	0x8fa6e0c2b3d1bd2cu, 0x237a0aab8d758598u, 0x402bc8bafab787acu,
	0x36f11e5784960bcau, 0xd847efef42e18920u, 0x8e8bd8d79637c35cu,
	0xe822d75860d5bac8u, 0x1ee5fd04375a12dau, 0x66511429a352b466u,
	0x755ea5cbd9b80b66u, 0xf9abc718cc0b2a34u, 0x273c03b78e6de294u,
	0x2f55d49c7ee9b172u, 0x7618efbb60287e9au, 0xca59820dccecccd0u,
	0xf64b51d3949ec63eu, 0x3e956ae2b1240036u, 0xa38719737379092cu,
	0xd644fa6ac399c768u, 0x73f104b6a9edbfacu, 0x9530c747c334db14u,
	0x982fba319c05c988u, 0x3fb7748966914fa0u, 0x58c9cc44b38dd372u,
	0x843900334f8c5b8au, 0xdf3dc13dcf259e44u, 0x97c9ef875aab690cu,
	0xb9c998079e64f0dau, 0x17542e0a579cbc3eu, 0xb3127999a7bb5ee8u,
	0xe6774609604d55fau, 0x2819f13920fcaee8u, 0xfab712280dbdb7eau,
	0x52f5ddafa0353d9au, 0x08a16fa55c8c8ff0u, 0x0279179d7abb7efau,
	0xe34ee8a52ac170ccu, 0x86b2d34f61b29ce6u, 0x2dbf8cc5f771818eu,
	0xaec8ae6387c1f30cu, 0x2749f79de79287b0u, 0xbb83eebc3e41c756u,
	0xc835430cfa89ac3eu, 0xa3e68592f5b65c5au, 0x9fa0e9a981915448u,
	0xb5fad5d4f274b5aeu, 0x1dfa737d4c8868e2u, 0xcab018d705046f3eu,
	0xd34989f369a63f88u, 0x1b0ffd50e991ea52u, 0x2a08bad44c256a90u,
	0x902bb1a125a420e0u, 0x0654ce0ca625c9b4u, 0x775f3f79ffd5cc4au,
	0x828cce21addb1822u, 0xa50457ffd2dde72cu, 0x73b1cc09d76aa970u,
	0x6d52443b3ed9c79cu, 0xa6b1dac39ca6d4c0u, 0x50dabdb516da316au,
	0xff8340edfd40cd1eu, 0x29ea26bfb67cc3ecu, 0x72dbcc00c41e5d48u,
	0xb87d2449f1f07468u, 0x2593fc5099664188u, 0x6834df287c219276u,
	0xc652ef76cb252b22u, 0x7488d1fb212df022u, 0xd119b2f510048998u,
	0xb8bac19eb4d3b17au, 0x30100dc8cc18cc8eu, 0x6a6115ac50b34f16u,
	0x38821203e35017b4u, 0x3ceedbea11e82318u, 0x51d0662ad3deb63cu,
	0xc537fb9aabe28afeu, 0x72d5c78e2d86588cu, 0xeb8d7f242dcd29d4u,
	0xfa99c1ad29d01fb0u, 0x635686900d973f88u, 0x445666aadf842b46u,
	0x7f409c8e2899f274u, 0x5a249f93b9ed0b44u, 0xa7a02f7851f9bb2au,
	0x73d2102753731428u, 0xe24f454d0beaedb8u, 0x8887ed1b25e90cf4u,
	0xe516ade7f55b9f98u, 0xead6da49ad59fa7au, 0xa591c7c905c22e6au,
	0x12d7631aec491b14u, 0xd01d5f3fd4928468u, 0xc66c57cb314e2496u,
	0x463897493457f242u, 0xe6d5598d92687dd0u, 0x52a56d8a4e7ab350u,
	0x8cfed4b88453aa6au, 0x442589fe11ae8a88u, 0xd296444f51b23134u,
	0xe59745033058ed62u, 0xb8c4efc9babbfc32u, 0xe37b8b739aa86a3au,
	0xc9df1f374879a15au, 0xe1598d7ee3d5dc8cu, 0xad159bce0e64934eu,
	0xd0c904aabf7626cau, 0x6d2b13e1f571710eu, 0xac9e1cba4c7e77aeu,
	0xdea44a2806d2784cu, 0x2f8016b979a0574au, 0x63bb018632a3be7eu,
	0x369312758bc25c14u, 0x24ff6585efccc43cu, 0x49e913b593c564f4u,
	0xc203d8f8deb37030u, 0xec7b879dde637c98u, 0x39581648bc09382cu,
	0x95bed2b1da4bd7cau, 0xe0e255e05d6dc326u, 0x2965773f5edeec1eu,
	0xe08417fdc51b7c92u, 0xeb4ce6345f361972u, 0xef5a185d7e43a022u,
	0xaebda3a8b0aa6040u, 0x44eadcecba0addb4u, 0x9f65977ad72f40eau,
	0x8b0e596cee5e658au, 0x7bfb209f82bee386u, 0xf6fb41e29c5e0074u,
	0x852cde6a489e768eu,
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
		fp = (fp << 2) + dd_gear_ls[p[l - 1]];
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
