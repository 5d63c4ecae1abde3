//! `include/sluice.h` is generated from `src/ffi.rs` by cbindgen; this test
//! regenerates it in memory and fails when the committed file differs.
//! `SLUICE_BLESS=1 cargo test -p sluice-client --test header` rewrites it.

use std::path::{Path, PathBuf};
use std::process::Command;

const REGEN: &str = "SLUICE_BLESS=1 cargo test -p sluice-client --test header";

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn header_path() -> PathBuf {
    crate_dir().join("include/sluice.h")
}

fn generate() -> Vec<u8> {
    let dir = crate_dir();
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml"))
        .expect("client-lib/cbindgen.toml must parse");
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(dir.join("src/ffi.rs"))
        .generate()
        .expect("cbindgen failed on client-lib/src/ffi.rs");
    let mut out = Vec::new();
    bindings.write(&mut out);
    out
}

#[test]
fn header_is_current() {
    let fresh = generate();
    let path = header_path();
    if std::env::var_os("SLUICE_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &fresh).expect("cannot write client-lib/include/sluice.h");
        eprintln!("wrote {}", path.display());
        return;
    }
    let committed = std::fs::read(&path).unwrap_or_default();
    if committed == fresh {
        return;
    }
    let (old, new) = (
        String::from_utf8_lossy(&committed),
        String::from_utf8_lossy(&fresh),
    );
    let first_diff = old
        .lines()
        .zip(new.lines())
        .position(|(a, b)| a != b)
        .unwrap_or_else(|| old.lines().count().min(new.lines().count()));
    panic!(
        "client-lib/include/sluice.h is stale: it differs from what cbindgen generates \
         from client-lib/src/ffi.rs, first at line {}:\n  committed: {:?}\n  generated: {:?}\n\
         Regenerate it with:\n  {REGEN}\nand commit the result.",
        first_diff + 1,
        old.lines().nth(first_diff).unwrap_or("<end of file>"),
        new.lines().nth(first_diff).unwrap_or("<end of file>"),
    );
}

/// The generated header compiles as strict C11 and as C++17, when a
/// compiler is installed (skipped with a note otherwise).
#[test]
fn header_compiles_as_c_and_cxx() {
    // Uses both `struct sluice_submit` and the function `sluice_submit`.
    let probe = r#"#include "sluice.h"
static int probe(struct sluice_client *c) {
    struct sluice_submit s;
    struct sluice_completion done;
    uint64_t t = 0;
    s.model_id = 0;
    s.priority = SLUICE_PRIORITY_RT;
    s.deadline_ns = sluice_now_ns();
    s.input.off = 0;
    s.input.len = 0;
    s.output = s.input;
    if (sluice_submit(c, &s, &t) != SLUICE_OK) return SLUICE_EINVAL;
    return sluice_wait(c, t, &done) == SLUICE_OK && done.status == SLUICE_STATUS_OK;
}
int main(void) { return probe(NULL) == SLUICE_EINVAL ? 0 : 1; }
"#;
    let tmp = std::env::temp_dir().join(format!("sluice-header-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    std::fs::write(tmp.join("sluice.h"), generate()).unwrap();
    let src = tmp.join("probe.c");
    std::fs::write(&src, probe).unwrap();
    for (cc, lang, std) in [("cc", "c", "-std=c11"), ("c++", "c++", "-std=c++17")] {
        let out = Command::new(cc)
            .args([
                "-fsyntax-only",
                "-Wall",
                "-Wextra",
                "-Werror",
                "-pedantic",
                std,
                "-x",
                lang,
            ])
            .arg("-I")
            .arg(&tmp)
            .arg(&src)
            .output();
        match out {
            Err(e) => eprintln!("note: skipping the {lang} check: cannot run {cc}: {e}"),
            Ok(o) => assert!(
                o.status.success(),
                "include/sluice.h does not compile as {lang} with {cc}:\n{}",
                String::from_utf8_lossy(&o.stderr)
            ),
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
}
