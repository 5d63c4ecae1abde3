/*
 * hello.c: the smallest complete sluice client in C.
 *
 *   hello [SOCKET [MODEL [N]]]
 *
 * Connects to sluiced (SOCKET, or the default path when it is missing or
 * "-"), looks up MODEL (default "echo_small"), and runs N (default 100)
 * real-time requests one at a time: write the input into the arena, submit,
 * wait, check the status and that the output is exactly what the simulated
 * GPU computes (sluice_expected_output). Prints the round-trip times and
 * exits 0, or prints what failed and exits 1.
 *
 * It then exercises the error paths of the C ABI against the live daemon,
 * prints the model's tensors (sluice_model_io, sluice_model_tensor), runs
 * one typed request at batch 1 (sluice_submit_typed) and checks each
 * output (sluice_expected_typed_output), and shows the named error of a
 * typed request with a wrong length (CI runs this example through
 * scripts/run-c-example.sh).
 *
 * Build: scripts/build-c-example.sh (see docs/c-api.md).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.h"

/* Prints the failing call with the code's text and the detailed message. */
static int fail(const char *what, int rc) {
    fprintf(stderr, "hello: %s failed: %s (%d): %s\n", what, sluice_strerror(rc), rc,
            sluice_last_error_message());
    return 1;
}

/* Fails unless `rc` is the `want` code. */
static int expect_code(const char *what, int rc, int want) {
    if (rc == want) {
        return 0;
    }
    fprintf(stderr, "hello: %s returned %s (%d), expected %s (%d): %s\n", what,
            sluice_strerror(rc), rc, sluice_strerror(want), want, sluice_last_error_message());
    return 1;
}

/* Error paths and the non-blocking API, on a live connection. */
static int check_error_paths(struct sluice_client *c, const struct sluice_submit *good,
                             uint64_t redeemed_ticket) {
    struct sluice_submit s = *good;
    struct sluice_completion done;
    struct sluice_model_info m;
    uint64_t t = 0;
    int bad = 0;

    s.priority = 7;
    bad |= expect_code("submit with priority 7", sluice_submit(c, &s, &t), SLUICE_EINVAL);

    s = *good;
    s.input.off = sluice_arena_len(c);
    bad |= expect_code("submit with the input past the arena", sluice_submit(c, &s, &t),
                       SLUICE_EBADSPAN);

    bad |= expect_code("try_poll of a redeemed ticket", sluice_try_poll(c, redeemed_ticket, &done),
                       SLUICE_EBADTICKET);
    bad |= expect_code("wait with a NULL completion", sluice_wait(c, redeemed_ticket, NULL),
                       SLUICE_EINVAL);
    bad |= expect_code("lookup of a missing model", sluice_lookup_model(c, "no-such-model", &m),
                       SLUICE_ENOMODEL);

    /* One best-effort request, polled without blocking. */
    s = *good;
    s.priority = SLUICE_PRIORITY_BE;
    int rc = sluice_submit(c, &s, &t);
    if (rc != SLUICE_OK) {
        return fail("sluice_submit (best-effort)", rc);
    }
    const uint64_t give_up = sluice_now_ns() + 10ull * 1000 * 1000 * 1000;
    while ((rc = sluice_try_poll(c, t, &done)) == SLUICE_PENDING && sluice_now_ns() < give_up) {
    }
    if (rc == SLUICE_PENDING) {
        /* Still running after 10 s of polling: give it one more bounded wait. */
        rc = sluice_wait_timeout(c, t, 10ull * 1000 * 1000 * 1000, &done);
    }
    if (rc != SLUICE_OK) {
        return fail("sluice_try_poll (best-effort)", rc);
    }
    if (done.status != SLUICE_STATUS_OK) {
        fprintf(stderr, "hello: best-effort request failed: status %" PRIu32 " (%s)\n",
                done.status, sluice_status_str(done.status));
        return 1;
    }
    if (sluice_in_flight(c) != 0) {
        fprintf(stderr, "hello: %" PRIu32 " requests still in flight\n", sluice_in_flight(c));
        return 1;
    }
    return bad;
}

/* Most tensors each way this example handles. */
#define MAX_T 8

/* Prints the model's tensors, runs one typed request at batch 1 and checks
 * every output, then shows the error of a wrong length. */
static int check_typed(struct sluice_client *c, const struct sluice_model_info *m,
                       const char *model) {
    struct sluice_model_io io;
    int rc = sluice_model_io(c, m->id, &io);
    if (rc != SLUICE_OK) {
        return fail("sluice_model_io", rc);
    }
    printf("hello: model %s takes batches up to %" PRIu32 "; %" PRIu32 " inputs, %" PRIu32
           " outputs\n",
           model, io.max_batch, io.n_inputs, io.n_outputs);
    if (io.n_inputs > MAX_T || io.n_outputs > MAX_T) {
        fprintf(stderr, "hello: this example handles at most %d tensors each way\n", MAX_T);
        return 1;
    }
    const uint32_t batch = 1;
    const uint32_t n = io.n_inputs + io.n_outputs;
    struct sluice_span spans[2 * MAX_T];
    struct sluice_tensor_info info[2 * MAX_T];
    /* The table at 0, then every tensor on its own 64-byte lines. */
    uint64_t at = (16u * n + 63) & ~(uint64_t)63;
    for (uint32_t i = 0; i < n; i++) {
        const uint32_t dir = i < io.n_inputs ? SLUICE_INPUT : SLUICE_OUTPUT;
        const uint32_t index = i < io.n_inputs ? i : i - io.n_inputs;
        rc = sluice_model_tensor(c, m->id, dir, index, &info[i]);
        if (rc != SLUICE_OK) {
            return fail("sluice_model_tensor", rc);
        }
        printf("hello:   %s %" PRIu32 " \"%s\" %s[", dir == SLUICE_INPUT ? "input" : "output",
               index, info[i].name, sluice_elem_name(info[i].elem));
        for (uint32_t d = 0; d < info[i].rank; d++) {
            if (d == 0 && info[i].batched) {
                printf("N");
            } else {
                printf("%s%" PRIu64, d ? "," : "", info[i].dims[d]);
            }
        }
        spans[i].off = at;
        spans[i].len = sluice_tensor_bytes(&info[i], batch);
        printf("], %" PRIu64 " bytes at batch %" PRIu32 "\n", spans[i].len, batch);
        at = (at + spans[i].len + 63) & ~(uint64_t)63;
    }
    if (at > sluice_arena_len(c)) {
        fprintf(stderr, "hello: the typed request needs %" PRIu64 " arena bytes\n", at);
        return 1;
    }
    /* Inputs in place in the arena; the reference reads them there too
     * (nothing else touches them while no request is in flight). */
    uint8_t *arena = sluice_arena_ptr(c);
    const uint8_t *in_ptrs[MAX_T];
    size_t in_lens[MAX_T];
    for (uint32_t i = 0; i < io.n_inputs; i++) {
        for (uint64_t k = 0; k < spans[i].len; k++) {
            arena[spans[i].off + k] = (uint8_t)(k * 13u + i + 1u);
        }
        in_ptrs[i] = arena + spans[i].off;
        in_lens[i] = (size_t)spans[i].len;
    }
    struct sluice_typed_submit req = {
        .model_id = m->id,
        .priority = SLUICE_PRIORITY_RT,
        .batch = batch,
        .table_off = 0,
        .inputs = spans,
        .n_inputs = io.n_inputs,
        .outputs = spans + io.n_inputs,
        .n_outputs = io.n_outputs,
    };
    uint64_t t = 0;
    struct sluice_completion done;
    rc = sluice_submit_typed(c, &req, &t);
    if (rc != SLUICE_OK) {
        return fail("sluice_submit_typed", rc);
    }
    rc = sluice_wait(c, t, &done);
    if (rc != SLUICE_OK) {
        return fail("sluice_wait (typed)", rc);
    }
    if (done.status != SLUICE_STATUS_OK) {
        fprintf(stderr, "hello: typed request failed: %s: %s\n", sluice_status_str(done.status),
                sluice_last_error_message());
        return 1;
    }
    for (uint32_t o = 0; o < io.n_outputs; o++) {
        const struct sluice_span *s = &spans[io.n_inputs + o];
        uint8_t *want = malloc((size_t)s->len + 1);
        if (!want) {
            fprintf(stderr, "hello: out of memory\n");
            return 1;
        }
        rc = sluice_expected_typed_output(m->id, batch, in_ptrs, in_lens, io.n_inputs, o, want,
                                          (size_t)s->len);
        const int same = rc == SLUICE_OK && memcmp(arena + s->off, want, (size_t)s->len) == 0;
        free(want);
        if (!same) {
            fprintf(stderr, "hello: typed output %" PRIu32 " differs from the reference\n", o);
            return 1;
        }
    }
    printf("hello: typed request at batch %" PRIu32 " ok (%" PRIu64 " output bytes)\n", batch,
           done.output_len);

    /* A wrong length is refused before anything is sent, naming the tensor. */
    spans[0].len += 1;
    rc = sluice_submit_typed(c, &req, &t);
    spans[0].len -= 1;
    if (expect_code("typed submit with a wrong input length", rc, SLUICE_EBADTENSOR) != 0) {
        return 1;
    }
    const char *msg = sluice_last_error_message();
    if (strstr(msg, info[0].name) == NULL || strstr(msg, "takes") == NULL) {
        fprintf(stderr, "hello: the error does not name input \"%s\": %s\n", info[0].name, msg);
        return 1;
    }
    printf("hello: wrong length refused: %s\n", msg);
    return 0;
}

int main(int argc, char **argv) {
    const char *socket = (argc > 1 && strcmp(argv[1], "-") != 0) ? argv[1] : NULL;
    const char *model = argc > 2 ? argv[2] : "echo_small";
    long n = 100;
    if (argc > 3) {
        char *end = NULL;
        n = strtol(argv[3], &end, 10);
        if (end == argv[3] || *end != '\0' || n <= 0) {
            fprintf(stderr, "hello: N must be a positive integer, not \"%s\"\n", argv[3]);
            return 2;
        }
    }

    struct sluice_client *c = NULL;
    uint8_t *input = NULL, *want = NULL, *got = NULL;
    int status = 1;

    int rc = sluice_connect(socket, "hello.c", &c);
    if (rc != SLUICE_OK) {
        return fail("sluice_connect", rc);
    }
    struct sluice_model_info m;
    rc = sluice_lookup_model(c, model, &m);
    if (rc != SLUICE_OK) {
        fail("sluice_lookup_model", rc);
        goto out;
    }

    /* Arena layout: the input at 0, the output at the next 64-byte line. */
    const uint64_t in_off = 0;
    const uint64_t out_off = (m.input_bytes + 63) & ~(uint64_t)63;
    if (out_off + m.output_bytes > sluice_arena_len(c)) {
        fprintf(stderr,
                "hello: model %s needs %" PRIu64 " arena bytes, the arena has %" PRIu64 "\n",
                model, out_off + m.output_bytes, sluice_arena_len(c));
        goto out;
    }
    const size_t in_len = (size_t)m.input_bytes, out_len = (size_t)m.output_bytes;
    input = malloc(in_len + 1);
    want = malloc(out_len + 1);
    got = malloc(out_len + 1);
    if (!input || !want || !got) {
        fprintf(stderr, "hello: out of memory\n");
        goto out;
    }
    for (size_t i = 0; i < in_len; i++) {
        input[i] = (uint8_t)(i * 31u + 7u);
    }

    const struct sluice_submit req = {
        .model_id = m.id,
        .priority = SLUICE_PRIORITY_RT,
        .deadline_ns = 0,
        .input = {.off = in_off, .len = m.input_bytes},
        .output = {.off = out_off, .len = m.output_bytes},
    };
    uint64_t ticket = 0, min_ns = UINT64_MAX, max_ns = 0, sum_ns = 0;
    for (long k = 0; k < n; k++) {
        /* A different input each time, so a stale output cannot pass. */
        if (in_len > 0) {
            input[0] = (uint8_t)k;
        }
        rc = sluice_write_arena(c, in_off, input, in_len);
        if (rc != SLUICE_OK) {
            fail("sluice_write_arena", rc);
            goto out;
        }
        /* Zero-copy access: clear the output span in place. */
        memset(sluice_arena_ptr(c) + out_off, 0, out_len);

        struct sluice_completion done;
        const uint64_t t0 = sluice_now_ns();
        rc = sluice_submit(c, &req, &ticket);
        if (rc != SLUICE_OK) {
            fail("sluice_submit", rc);
            goto out;
        }
        rc = sluice_wait(c, ticket, &done);
        const uint64_t rtt = sluice_now_ns() - t0;
        if (rc != SLUICE_OK) {
            fail("sluice_wait", rc);
            goto out;
        }
        if (done.status != SLUICE_STATUS_OK) {
            fprintf(stderr, "hello: request %ld failed: status %" PRIu32 " (%s)\n", k,
                    done.status, sluice_status_str(done.status));
            goto out;
        }
        if (done.request_id != ticket || done.output_len != m.output_bytes) {
            fprintf(stderr,
                    "hello: request %ld: completion for ticket %#" PRIx64 " with %" PRIu64
                    " output bytes; expected ticket %#" PRIx64 " and %" PRIu64 "\n",
                    k, done.request_id, done.output_len, ticket, m.output_bytes);
            goto out;
        }
        rc = sluice_read_arena(c, out_off, got, out_len);
        if (rc != SLUICE_OK) {
            fail("sluice_read_arena", rc);
            goto out;
        }
        rc = sluice_expected_output(m.id, input, in_len, want, out_len);
        if (rc != SLUICE_OK) {
            fail("sluice_expected_output", rc);
            goto out;
        }
        if (memcmp(got, want, out_len) != 0) {
            size_t i = 0;
            while (got[i] == want[i]) {
                i++;
            }
            fprintf(stderr,
                    "hello: request %ld: output byte %zu is 0x%02x, expected 0x%02x\n", k, i,
                    got[i], want[i]);
            goto out;
        }
        sum_ns += rtt;
        min_ns = rtt < min_ns ? rtt : min_ns;
        max_ns = rtt > max_ns ? rtt : max_ns;
    }
    printf("hello: %ld requests to model %s (id %" PRIu32 ", %" PRIu64 " B in, %" PRIu64
           " B out) ok; round trip mean %.1f us, min %.1f us, max %.1f us\n",
           n, model, m.id, m.input_bytes, m.output_bytes, (double)sum_ns / (double)n / 1e3,
           (double)min_ns / 1e3, (double)max_ns / 1e3);

    if (check_error_paths(c, &req, ticket) != 0) {
        goto out;
    }
    printf("hello: error paths ok\n");
    if (check_typed(c, &m, model) != 0) {
        goto out;
    }
    status = 0;

out:
    free(input);
    free(want);
    free(got);
    sluice_disconnect(c);
    return status;
}
