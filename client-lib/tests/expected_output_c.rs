//! `examples/expected_output.c` (the C re-implementation of the simulated
//! device's output function that docs/c-api.md gives integrators) computes
//! the same bytes as `shm_proto::sim::expected_output`. Skipped with a note
//! when no C compiler is installed.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

/// (model id, input, output length): empty input and output, lengths that
/// are and are not multiples of 8, the quoted doc example, a long input.
fn cases() -> Vec<(u32, Vec<u8>, usize)> {
    vec![
        (7, b"abc".to_vec(), 12),
        (0, Vec::new(), 8),
        (7, Vec::new(), 5),
        (1, b"x".to_vec(), 0),
        (u32::MAX, (0..1000u32).map(|i| (i * 7) as u8).collect(), 77),
        (0x0102_0304, vec![0xff; 64], 64),
    ]
}

fn hex(b: &[u8]) -> String {
    b.iter().fold(String::new(), |mut s, x| {
        let _ = write!(s, "{x:02x}");
        s
    })
}

#[test]
fn c_reference_matches_rust() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = std::env::temp_dir().join(format!("sluice-sim-c-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    // A driver that prints one hex line per case.
    let mut main = String::from(
        "#include <stdint.h>\n#include <stdio.h>\n\
         void sluice_sim_expected_output(uint32_t, const uint8_t *, size_t, uint8_t *, size_t);\n\
         static void run(uint32_t m, const uint8_t *in, size_t n, size_t out_len) {\n\
         uint8_t out[128]; sluice_sim_expected_output(m, in, n, out, out_len);\n\
         for (size_t i = 0; i < out_len; i++) { printf(\"%02x\", out[i]); }\n\
         printf(\"\\n\"); }\n\
         int main(void) {\n",
    );
    let mut want = String::new();
    for (k, (model, input, out_len)) in cases().into_iter().enumerate() {
        assert!(out_len <= 128, "the driver's output buffer holds 128 bytes");
        let mut bytes: Vec<String> = input.iter().map(|b| b.to_string()).collect();
        if bytes.is_empty() {
            // An empty array is not C: one unused byte.
            bytes.push("0".into());
        }
        let _ = writeln!(
            main,
            "static const uint8_t in{k}[{}] = {{{}}}; run({model}u, in{k}, {}, {out_len});",
            bytes.len(),
            bytes.join(","),
            input.len()
        );
        let mut out = vec![0u8; out_len];
        shm_proto::sim::expected_output(model, &input, &mut out);
        want.push_str(&hex(&out));
        want.push('\n');
    }
    main.push_str("return 0; }\n");
    let main_c = tmp.join("main.c");
    std::fs::write(&main_c, main).unwrap();
    let bin = tmp.join("sim");
    let built = Command::new("cc")
        .args([
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            "-O2",
        ])
        .arg(dir.join("examples/expected_output.c"))
        .arg(&main_c)
        .arg("-o")
        .arg(&bin)
        .output();
    let built = match built {
        Ok(o) => o,
        Err(e) => {
            eprintln!("note: skipping the C reference check: cannot run cc: {e}");
            return;
        }
    };
    assert!(
        built.status.success(),
        "examples/expected_output.c does not compile:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let ran = Command::new(&bin).output().unwrap();
    assert!(ran.status.success());
    assert_eq!(String::from_utf8_lossy(&ran.stdout), want);
    let _ = std::fs::remove_dir_all(&tmp);
}
