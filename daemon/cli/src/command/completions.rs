//! `sluice completions SHELL` and `sluice man --out DIR`: what a shell and
//! `man` need, generated from the same argument definitions `--help`
//! prints, so they never disagree with it.

use std::path::PathBuf;
use std::process::ExitCode;

/// Print a completion script for sluice's commands and options to
/// standard output: `sluice completions bash >
/// /usr/share/bash-completion/completions/sluice` (zsh: a `_sluice` file
/// on `$fpath`; fish: `~/.config/fish/completions/sluice.fish`).
#[derive(clap::Args, Debug)]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

/// Write man pages: `sluice.1` and one per subcommand (`sluice-run.1`,
/// `sluice-bench-disb.1`, ...), into a folder (created if missing), e.g.
/// `sluice man --out /usr/share/man/man1`.
#[derive(clap::Args, Debug)]
pub struct ManArgs {
    /// The folder to write the pages into.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

/// Prints the completion script of `cmd` (the whole `sluice` command).
pub fn completions(a: CompletionsArgs, mut cmd: clap::Command) -> ExitCode {
    use std::io::Write as _;
    let mut script = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, "sluice", &mut script);
    match std::io::stdout().write_all(&script) {
        // A reader that stops early (`| head`) is not an error.
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            eprintln!("sluice completions: cannot write the script: {e}");
            ExitCode::FAILURE
        }
        _ => ExitCode::SUCCESS,
    }
}

/// Writes the man pages of `cmd` and its visible subcommands.
pub fn man(a: ManArgs, cmd: clap::Command) -> ExitCode {
    let fail = |what: &str, e: std::io::Error| {
        eprintln!("sluice man: cannot {what} {}: {e}", a.out.display());
        ExitCode::FAILURE
    };
    if let Err(e) = std::fs::create_dir_all(&a.out) {
        return fail("create", e);
    }
    if let Err(e) = clap_mangen::generate_to(cmd, &a.out) {
        return fail("write the pages into", e);
    }
    let mut pages: Vec<String> = match std::fs::read_dir(&a.out) {
        Ok(d) => d
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with("sluice") && n.ends_with(".1"))
            .collect(),
        Err(e) => return fail("list", e),
    };
    pages.sort();
    println!(
        "sluice man: {} pages in {}: {}",
        pages.len(),
        a.out.display(),
        pages.join(" ")
    );
    ExitCode::SUCCESS
}
