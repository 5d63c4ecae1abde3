//! Test helpers shared by both drivers: golden values from a uapi header
//! (a C program that includes it and prints request numbers, `sizeof`,
//! `offsetof`, for the `nr.rs` tests), and an fd that answers every ioctl
//! with `ENOTTY`, like a driver without sluice's patches.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::Command;

/// Compiles a program including `header` that prints each of `exprs`;
/// returns what it printed, by expression. `tag` names the scratch folder.
pub(crate) fn c_values(header: &Path, tag: &str, exprs: &[&str]) -> BTreeMap<String, u64> {
    let dir = std::env::temp_dir().join(format!("sluice-{tag}-golden-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let name = header.file_name().unwrap().to_string_lossy();
    let mut src = format!(
        "#include <stdio.h>\n#include <stddef.h>\n#include <stdalign.h>\n#include \"{name}\"\nint main(void) {{\n"
    );
    for e in exprs {
        src.push_str(&format!(
            "\tprintf(\"%s=%llu\\n\", \"{e}\", (unsigned long long)({e}));\n"
        ));
    }
    src.push_str("\treturn 0;\n}\n");
    let c_file = dir.join("golden.c");
    let exe = dir.join("golden");
    std::fs::write(&c_file, src).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let include = header.parent().unwrap().to_owned();
    let out = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Werror", "-I"])
        .arg(&include)
        .arg(&c_file)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run the C compiler `{cc}` (set CC or install gcc): {e}")
        });
    assert!(
        out.status.success(),
        "compiling the golden program against {} failed:\n{}",
        header.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().unwrap();
    assert!(run.status.success());
    std::fs::remove_dir_all(&dir).ok();
    String::from_utf8(run.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (k, v) = l.rsplit_once('=').unwrap();
            (k.to_owned(), v.parse().unwrap())
        })
        .collect()
}

/// `/dev/null`, read-write: every ioctl on it answers `ENOTTY`.
pub(crate) fn dev_null() -> OwnedFd {
    OwnedFd::from(
        File::options()
            .read(true)
            .write(true)
            .open("/dev/null")
            .unwrap(),
    )
}
