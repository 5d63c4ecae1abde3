//! `sluice completions` and `sluice man` produce what a shell and `man`
//! read, covering the visible subcommands (the man pages none of the
//! hidden ones).

use std::process::Command;

fn sluice() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
}

#[test]
fn completion_scripts_name_the_subcommands_and_their_options() {
    // fish spells a long option `-l NAME`.
    for (shell, batch) in [
        ("bash", "--batch"),
        ("zsh", "--batch"),
        ("fish", "-l batch"),
    ] {
        let out = sluice().args(["completions", shell]).output().unwrap();
        assert!(out.status.success(), "{shell}: {out:?}");
        let script = String::from_utf8(out.stdout).unwrap();
        for word in ["inspect", batch, "disb", "completions"] {
            assert!(script.contains(word), "{shell} script lacks {word}");
        }
    }
    let out = sluice().args(["completions", "tcsh"]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bash") && err.contains("zsh"), "{err}");
}

#[test]
fn man_pages_are_roff_with_one_page_per_visible_subcommand() {
    let dir = std::env::temp_dir().join(format!("sluice-man-test-{}", std::process::id()));
    let out = sluice().args(["man", "--out"]).arg(&dir).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let page = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
    let top = page("sluice.1");
    assert!(top.contains(".TH sluice 1"), "{top}");
    assert!(page("sluice-run.1").contains("\\-\\-input"));
    assert!(page("sluice-bench-disb.1").contains(".SH SYNOPSIS"));
    assert!(!dir.join("sluice-__client.1").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}
