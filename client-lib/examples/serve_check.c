/* serve_check: typed requests against a model the daemon serves from its
 * model repository, each output checked against the reference outputs of
 * either version of the model (the serving check runs it while the model
 * file is replaced and reloaded).
 *
 *   serve_check SOCKET MODEL DIR N
 *
 * N requests, one after another; N = 0: until the file DIR/stop exists.
 * DIR holds one raw little-endian file per input (DIR/<input>.bin, the
 * whole batch) and, per version, the expected outputs (DIR/v1/<output>.bin,
 * DIR/v2/<output>.bin). The batch is the first input's file size over its
 * size at batch 1. Every request must complete OK with all of its outputs
 * within 1e-4 x max|reference| of one version; the exit status is 0 only
 * when all N did. Element type f32 only (what the check's model has). */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sluice.h"

#define MAX_T 8

static void *read_file(const char *dir, const char *sub, const char *name, size_t *len) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s%s%s.bin", dir, sub, *sub ? "/" : "", name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "serve_check: cannot open %s\n", path);
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc(n > 0 ? (size_t)n : 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "serve_check: cannot read %s\n", path);
        fclose(f);
        free(buf);
        return NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return buf;
}

/* Whether got is within 1e-4 x max|want| of want, element by element. */
static int close_to(const float *got, const float *want, size_t n) {
    float scale = 0.0f;
    for (size_t i = 0; i < n; i++) {
        scale = fmaxf(scale, fabsf(want[i]));
    }
    for (size_t i = 0; i < n; i++) {
        if (!(fabsf(got[i] - want[i]) <= 1e-4f * scale + 1e-30f)) {
            return 0;
        }
    }
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: serve_check SOCKET MODEL DIR N\n");
        return 2;
    }
    const char *model = argv[2], *dir = argv[3];
    const long n_req = strtol(argv[4], NULL, 10);
    struct sluice_client *c = NULL;
    int rc = sluice_connect(argv[1], "serve-check-c", &c);
    if (rc != SLUICE_OK) {
        fprintf(stderr, "serve_check: connect: %s: %s\n", sluice_strerror(rc),
                sluice_last_error_message());
        return 1;
    }
    struct sluice_model_info m;
    struct sluice_model_io io;
    if ((rc = sluice_lookup_model(c, model, &m)) != SLUICE_OK ||
        (rc = sluice_model_io(c, m.id, &io)) != SLUICE_OK) {
        fprintf(stderr, "serve_check: model %s: %s: %s\n", model, sluice_strerror(rc),
                sluice_last_error_message());
        return 1;
    }
    if (io.n_inputs > MAX_T || io.n_outputs > MAX_T) {
        fprintf(stderr, "serve_check: at most %d tensors each way\n", MAX_T);
        return 1;
    }
    const uint32_t n = io.n_inputs + io.n_outputs;
    struct sluice_tensor_info info[2 * MAX_T];
    void *data[2 * MAX_T];      /* inputs */
    void *want[2][MAX_T];       /* per version, per output */
    size_t len[2 * MAX_T], wlen;
    uint32_t batch = 0;
    for (uint32_t i = 0; i < n; i++) {
        const uint32_t d = i < io.n_inputs ? SLUICE_INPUT : SLUICE_OUTPUT;
        const uint32_t k = i < io.n_inputs ? i : i - io.n_inputs;
        if ((rc = sluice_model_tensor(c, m.id, d, k, &info[i])) != SLUICE_OK) {
            fprintf(stderr, "serve_check: sluice_model_tensor: %s\n", sluice_strerror(rc));
            return 1;
        }
        if (info[i].elem != SLUICE_ELEM_F32) {
            fprintf(stderr, "serve_check: tensor \"%s\" is %s; this check reads f32 only\n",
                    info[i].name, sluice_elem_name(info[i].elem));
            return 1;
        }
        if (d == SLUICE_INPUT) {
            if (!(data[i] = read_file(dir, "", info[i].name, &len[i]))) {
                return 1;
            }
            if (i == 0) {
                batch = (uint32_t)(len[0] / sluice_tensor_bytes(&info[0], 1));
            }
        } else {
            for (int v = 0; v < 2; v++) {
                if (!(want[v][k] = read_file(dir, v ? "v2" : "v1", info[i].name, &wlen))) {
                    return 1;
                }
            }
        }
    }
    /* Table at 0, then each tensor on its own 64-byte lines. */
    struct sluice_span spans[2 * MAX_T];
    uint64_t at = (16u * n + 63) & ~(uint64_t)63;
    for (uint32_t i = 0; i < n; i++) {
        spans[i].off = at;
        spans[i].len = sluice_tensor_bytes(&info[i], batch);
        if (i < io.n_inputs && spans[i].len != len[i]) {
            fprintf(stderr, "serve_check: input \"%s\" file holds %zu bytes, not %" PRIu64 "\n",
                    info[i].name, len[i], spans[i].len);
            return 1;
        }
        at = (at + spans[i].len + 63) & ~(uint64_t)63;
    }
    for (uint32_t i = 0; i < io.n_inputs; i++) {
        if ((rc = sluice_write_arena(c, spans[i].off, data[i], len[i])) != SLUICE_OK) {
            fprintf(stderr, "serve_check: write_arena: %s\n", sluice_strerror(rc));
            return 1;
        }
    }
    struct sluice_typed_submit req = {
        .model_id = m.id,
        .priority = SLUICE_PRIORITY_RT,
        .batch = batch,
        .table_off = 0,
        .inputs = spans,
        .n_inputs = io.n_inputs,
        .outputs = spans + io.n_inputs,
        .n_outputs = io.n_outputs,
    };
    char stop[4096];
    snprintf(stop, sizeof stop, "%s/stop", dir);
    long on[2] = {0, 0}, failed = 0, mismatched = 0, r = 0;
    float *got = malloc((size_t)spans[io.n_inputs].len * io.n_outputs + 64);
    for (; n_req ? r < n_req : access(stop, F_OK) != 0; r++) {
        uint64_t t;
        struct sluice_completion done;
        if ((rc = sluice_submit_typed(c, &req, &t)) != SLUICE_OK ||
            (rc = sluice_wait(c, t, &done)) != SLUICE_OK) {
            fprintf(stderr, "serve_check: request %ld: %s: %s\n", r, sluice_strerror(rc),
                    sluice_last_error_message());
            failed++;
            continue;
        }
        if (done.status != SLUICE_STATUS_OK) {
            fprintf(stderr, "serve_check: request %ld: %s\n", r, sluice_status_str(done.status));
            failed++;
            continue;
        }
        int version = -1;
        for (int v = 0; v < 2 && version < 0; v++) {
            int all = 1;
            for (uint32_t o = 0; o < io.n_outputs && all; o++) {
                const struct sluice_span *s = &spans[io.n_inputs + o];
                sluice_read_arena(c, s->off, (uint8_t *)got, (size_t)s->len);
                all = close_to(got, want[v][o], (size_t)s->len / 4);
            }
            if (all) {
                version = v;
            }
        }
        if (version < 0) {
            fprintf(stderr, "serve_check: request %ld: outputs match neither version\n", r);
            mismatched++;
        } else {
            on[version]++;
        }
    }
    printf("serve_check (C): %ld requests at batch %" PRIu32 ": %ld on v1, %ld on v2, %ld failed, "
           "%ld mismatched\n",
           r, batch, on[0], on[1], failed, mismatched);
    sluice_disconnect(c);
    return (failed == 0 && mismatched == 0 && on[0] + on[1] == r && r > 0) ? 0 : 1;
}
