/*
 * The simulated device's output function (shm_proto::sim) in plain C11, for
 * integrators who want to check results without calling
 * sluice_expected_output(). docs/c-api.md specifies it; the Rust test
 * client-lib/tests/expected_output_c.rs compiles this file and checks it
 * byte for byte against the Rust implementation.
 *
 * Self-contained: no sluice header, no library. Copy it freely.
 */
#include <stddef.h>
#include <stdint.h>

/* One step of splitmix64 (Steele, Lea, Flood 2014). All arithmetic is
 * modulo 2^64 (uint64_t wraps). */
static uint64_t sluice_splitmix64(uint64_t x)
{
    uint64_t z = x + 0x9e3779b97f4a7c15u;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

/* Writes out[0..out_len) for model_id and in[0..in_len).
 * 1. seed = FNV-1a-64 over the 4 bytes of model_id, least significant
 *    first, then the input bytes;
 * 2. out[i] = byte (i % 8) of splitmix64(seed + i / 8), where byte 0 is the
 *    least significant (little-endian), whatever the host's byte order. */
void sluice_sim_expected_output(uint32_t model_id, const uint8_t *in, size_t in_len,
                                uint8_t *out, size_t out_len)
{
    uint64_t h = 0xcbf29ce484222325u; /* FNV-1a-64 offset basis */
    for (int k = 0; k < 4; k++) {
        h ^= (uint64_t)((model_id >> (8 * k)) & 0xffu);
        h *= 0x100000001b3u; /* FNV-1a-64 prime */
    }
    for (size_t k = 0; k < in_len; k++) {
        h ^= (uint64_t)in[k];
        h *= 0x100000001b3u;
    }
    uint64_t word = 0;
    for (size_t i = 0; i < out_len; i++) {
        if (i % 8 == 0)
            word = sluice_splitmix64(h + (uint64_t)(i / 8));
        out[i] = (uint8_t)(word >> (8 * (i % 8)));
    }
}
