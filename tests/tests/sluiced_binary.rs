//! The real `sluiced` binary, when it has been built next to this test
//! binary (`target/<profile>/sluiced`; `cargo build -p sluice-service` or a
//! workspace `cargo test` builds it). Skipped, with a note, when absent:
//! `cargo test -p sluice-tests` alone does not build the daemon's binaries.

use std::process::{Command, Stdio};

use rustix::process::Signal;
use sluice_client::Error;
use sluice_tests::{ChildGuard, TestDir, connect, lookup, query_status, run_one, secs, wait_for};

sluice_tests::role_entry!();

fn sluiced_or_skip(test: &str) -> Option<std::path::PathBuf> {
    let found = sluice_tests::find_sluiced();
    match &found {
        Some(p) => eprintln!("{test}: using {}", p.display()),
        None => eprintln!(
            "{test}: SKIPPED: no sluiced binary next to {:?}; run `cargo build -p \
             sluice-service` first",
            std::env::current_exe().ok()
        ),
    }
    found
}

#[test]
fn check_config_names_the_bad_key_and_exits_2() {
    let _w = sluice_tests::watchdog("check_config_names_the_bad_key_and_exits_2", 60);
    let Some(sluiced) = sluiced_or_skip("check_config") else {
        return;
    };
    let dir = TestDir::new("checkcfg");
    let cases = [
        ("[clients]\nsq_entries = 300\n", "clients.sq_entries"),
        ("[daemon]\nsockett = \"/x\"\n", "sockett"),
        ("[device]\ntime_scale = -1.0\n", "device.time_scale"),
        ("[clients\n", "line 1"),
    ];
    for (k, (text, key)) in cases.iter().enumerate() {
        let file = dir.join(&format!("bad{k}.toml"));
        std::fs::write(&file, text).unwrap();
        let out = Command::new(&sluiced)
            .arg("--check-config")
            .arg(&file)
            .stdin(Stdio::null())
            .output()
            .expect("run sluiced");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{text:?}: {stderr}");
        assert!(
            stderr.contains(key),
            "{text:?}: the error should name {key:?}: {stderr}"
        );
        assert!(
            stderr.contains(&file.display().to_string()),
            "{text:?}: the error should name the file: {stderr}"
        );
    }
    let good = dir.join("good.toml");
    std::fs::write(&good, "[clients]\nsq_entries = 512\n").unwrap();
    let out = Command::new(&sluiced)
        .arg("--check-config")
        .arg(&good)
        .output()
        .expect("run sluiced");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("sq_entries = 512"), "{stdout}");
}

#[test]
fn binary_serves_clients_and_stops_on_sigterm() {
    let _w = sluice_tests::watchdog("binary_serves_clients_and_stops_on_sigterm", 60);
    let Some(sluiced) = sluiced_or_skip("binary_serves") else {
        return;
    };
    let dir = TestDir::new("binary");
    let socket = dir.join("sluiced.sock");
    let config = dir.join("sluiced.toml");
    std::fs::write(
        &config,
        format!(
            "[daemon]\nsocket = {:?}\nrealtime_priority = 0\nlock_memory = false\n\n\
             [clients]\nsq_entries = 8\ncq_entries = 8\narena_bytes = 65536\n",
            socket.display().to_string()
        ),
    )
    .unwrap();
    let log = std::fs::File::create(dir.join("sluiced.log")).unwrap();
    let mut daemon = ChildGuard::spawn(
        Command::new(&sluiced)
            .arg("--config")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log),
    )
    .expect("spawn sluiced");
    let log_text = || std::fs::read_to_string(dir.join("sluiced.log")).unwrap_or_default();
    assert!(
        wait_for(|| query_status(&socket).is_ok(), secs(30)),
        "sluiced never answered; log:\n{}",
        log_text()
    );
    let st = query_status(&socket).unwrap();
    assert_eq!(st.pid, daemon.pid());

    let mut c = connect(&socket, "binary-client");
    assert_eq!(c.geometry().sq_entries, 8, "the config file was applied");
    let echo = lookup(&mut c, "echo_small");
    for i in 0..20 {
        run_one(&mut c, &echo, 21, i).expect("request served by sluiced");
    }

    let exit = daemon
        .signal_and_wait(Signal::TERM, secs(30))
        .unwrap_or_else(|| panic!("sluiced ignored SIGTERM; log:\n{}", log_text()));
    assert!(exit.success(), "{exit}; log:\n{}", log_text());
    assert!(
        wait_for(|| c.is_disconnected(), secs(30)),
        "client did not notice the stop"
    );
    assert_eq!(
        c.lookup_model("echo_small").err(),
        Some(Error::Disconnected)
    );
    assert!(
        !socket.exists(),
        "sluiced removes its socket on a clean stop"
    );
}
