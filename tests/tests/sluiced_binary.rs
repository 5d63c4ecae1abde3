//! The real `sluiced` binary, when it has been built next to this test
//! binary (`target/<profile>/sluiced`; `cargo build -p sluice-service` or a
//! workspace `cargo test` builds it). Skipped, with a note, when absent:
//! `cargo test -p sluice-tests` alone does not build the daemon's binaries.

use std::process::{Command, Stdio};

use rustix::process::Signal;
use sluice_client::Error;
use sluice_tests::{TestDir, connect, lookup, query_status, run_one, secs, wait_for};

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
    let config = format!(
        "[daemon]\nsocket = {:?}\nrealtime_priority = 0\nlock_memory = false\n\n\
         [clients]\nsq_entries = 8\ncq_entries = 8\narena_bytes = 65536\n",
        socket.display().to_string()
    );
    let mut daemon = sluice_tests::spawn_sluiced(&sluiced, dir.path(), &socket, &config);
    let log_text = || sluice_tests::sluiced_log(dir.path());
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

#[test]
fn binary_serves_metrics_from_its_config_file() {
    let _w = sluice_tests::watchdog("binary_serves_metrics_from_its_config_file", 60);
    let Some(sluiced) = sluiced_or_skip("binary_metrics") else {
        return;
    };
    let dir = TestDir::new("binary-metrics");
    let socket = dir.join("sluiced.sock");
    let config = format!(
        "[daemon]\nsocket = {:?}\nrealtime_priority = 0\nlock_memory = false\n\n\
         [clients]\narena_bytes = 65536\n\n[metrics]\nlisten = \"127.0.0.1:0\"\n",
        socket.display().to_string()
    );
    let mut daemon = sluice_tests::spawn_sluiced(&sluiced, dir.path(), &socket, &config);
    let log_text = || sluice_tests::sluiced_log(dir.path());
    let at = query_status(&socket).unwrap().metrics;
    assert!(at.starts_with("127.0.0.1:") && !at.ends_with(":0"), "{at}");
    let mut c = connect(&socket, "binary-metrics");
    let echo = lookup(&mut c, "echo_small");
    for i in 0..20 {
        run_one(&mut c, &echo, 22, i).expect("request served by sluiced");
    }
    let mut s = std::net::TcpStream::connect(&at).unwrap();
    s.set_read_timeout(Some(secs(30))).unwrap();
    std::io::Write::write_all(&mut s, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut got = String::new();
    std::io::Read::read_to_string(&mut s, &mut got).unwrap();
    assert!(got.starts_with("HTTP/1.1 200 OK\r\n"), "{got}");
    assert!(got.ends_with("# EOF\n"), "{got}");
    let st = query_status(&socket).unwrap();
    assert_eq!(st.completed, 20);
    for line in [
        "sluice_requests_received_total 20".to_owned(),
        format!(
            "sluice_requests_completed_total{{model=\"echo_small\",priority=\"rt\",status=\"ok\"}} {}",
            st.completed
        ),
        "sluice_request_latency_seconds_count{model=\"echo_small\",priority=\"rt\"} 20".to_owned(),
    ] {
        assert!(
            got.lines().any(|l| l == line),
            "no line {line:?} in:\n{got}"
        );
    }
    let exit = daemon
        .signal_and_wait(Signal::TERM, secs(30))
        .unwrap_or_else(|| panic!("sluiced ignored SIGTERM; log:\n{}", log_text()));
    assert!(exit.success(), "{exit}; log:\n{}", log_text());
}

#[test]
fn sighup_rescans_the_model_directory_without_a_restart() {
    let _w = sluice_tests::watchdog("sighup_rescans_the_model_directory", 120);
    let Some(sluiced) = sluiced_or_skip("sighup_rescans") else {
        return;
    };
    let dir = TestDir::new("sighup");
    let socket = dir.join("sluiced.sock");
    let models = dir.join("models");
    std::fs::create_dir_all(&models).unwrap();
    let fc = |w: f32| sluice_onnx::test_models::gemm(2, 2, &[w; 4], &[0.0; 2], true);
    std::fs::write(models.join("a.onnx"), fc(1.0)).unwrap();
    let config = format!(
        "[daemon]\nsocket = {:?}\nrealtime_priority = 0\nlock_memory = false\n\n\
         [device]\nbackend = \"cpu\"\n\n[models]\ndir = {:?}\n",
        socket.display().to_string(),
        models.display().to_string()
    );
    let mut daemon = sluice_tests::spawn_sluiced(&sluiced, dir.path(), &socket, &config);
    let log_text = || sluice_tests::sluiced_log(dir.path());
    let versions = || {
        query_status(&socket)
            .map(|st| {
                st.model_versions
                    .iter()
                    .map(|m| (m.name.clone(), m.id, m.version))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    assert_eq!(versions(), [("a".to_owned(), 0, 1)]);
    // A new file, a changed file, then SIGHUP: the daemon keeps running.
    std::fs::write(models.join("b.onnx"), fc(2.0)).unwrap();
    std::fs::write(models.join("a.onnx"), fc(3.0)).unwrap();
    daemon.signal(Signal::HUP);
    let want = [("a".to_owned(), 0, 2), ("b".to_owned(), 1, 1)];
    assert!(
        wait_for(|| versions() == want, secs(30)),
        "{:?}; log:\n{}",
        versions(),
        log_text()
    );
    // A removed file is unloaded by the next SIGHUP.
    std::fs::remove_file(models.join("a.onnx")).unwrap();
    daemon.signal(Signal::HUP);
    let want = [("b".to_owned(), 1, 1)];
    assert!(
        wait_for(|| versions() == want, secs(30)),
        "{:?}; log:\n{}",
        versions(),
        log_text()
    );
    assert_eq!(query_status(&socket).unwrap().pid, daemon.pid());
    let exit = daemon
        .signal_and_wait(Signal::TERM, secs(30))
        .unwrap_or_else(|| panic!("sluiced ignored SIGTERM; log:\n{}", log_text()));
    assert!(exit.success(), "{exit}; log:\n{}", log_text());
}

/// Runs `sluiced` with `args` to its exit (killed, and the test failed, if
/// it is still running after 60 s); its exit code, stdout and stderr.
fn run_sluiced(
    sluiced: &std::path::Path,
    dir: &TestDir,
    tag: &str,
    args: &[&std::ffi::OsStr],
) -> (Option<i32>, String, String) {
    let (out, err) = (
        dir.join(&format!("{tag}.out")),
        dir.join(&format!("{tag}.err")),
    );
    let mut child = Command::new(sluiced)
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .expect("run sluiced");
    let mut status = None;
    wait_for(
        || {
            status = child.try_wait().unwrap();
            status.is_some()
        },
        secs(60),
    );
    let Some(status) = status else {
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "sluiced {args:?} still running after 60 s; stderr:\n{}",
            std::fs::read_to_string(&err).unwrap_or_default()
        );
    };
    let read = |p: &std::path::Path| std::fs::read_to_string(p).unwrap_or_default();
    (status.code(), read(&out), read(&err))
}

/// The `sluiced: error:` line and its `caused by:` lines (log lines left
/// out).
fn error_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.starts_with("sluiced: error:") || l.starts_with("  caused by:"))
        .collect()
}

#[test]
fn check_config_takes_the_file_either_way() {
    let _w = sluice_tests::watchdog("check_config_takes_the_file_either_way", 60);
    let Some(sluiced) = sluiced_or_skip("check_config_forms") else {
        return;
    };
    let dir = TestDir::new("checkforms");
    let file = dir.join("sluiced.toml");
    std::fs::write(&file, "[clients]\nmax_clients = 9\n").unwrap();
    let (f, c, cc) = (
        file.as_os_str(),
        std::ffi::OsStr::new("--config"),
        std::ffi::OsStr::new("--check-config"),
    );
    let forms: [&[&std::ffi::OsStr]; 4] = [&[cc, f], &[c, f, cc], &[cc, c, f], &[cc, f, c, f]];
    let mut outputs = Vec::new();
    for (k, args) in forms.iter().enumerate() {
        let (code, stdout, stderr) = run_sluiced(&sluiced, &dir, &format!("form{k}"), args);
        assert_eq!(code, Some(0), "{args:?}: {stderr}");
        assert!(
            stdout.starts_with(&format!("# {} is valid\n", file.display())),
            "{args:?}: {stdout}"
        );
        assert!(stdout.contains("max_clients = 9"), "{args:?}: {stdout}");
        outputs.push(stdout);
    }
    assert!(outputs.windows(2).all(|w| w[0] == w[1]), "{outputs:#?}");

    // Two different files is a usage error, not a silent choice.
    let other = dir.join("other.toml");
    std::fs::write(&other, "").unwrap();
    let (code, _, stderr) = run_sluiced(&sluiced, &dir, "two", &[cc, f, c, other.as_os_str()]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("name different files"), "{stderr}");

    // A bad file fails the same way in both forms.
    std::fs::write(&file, "[clients]\nmax_clients = 0\n").unwrap();
    let (code1, _, err1) = run_sluiced(&sluiced, &dir, "bad1", &[cc, f]);
    let (code2, _, err2) = run_sluiced(&sluiced, &dir, "bad2", &[c, f, cc]);
    assert_eq!((code1, code2), (Some(2), Some(2)), "{err1}\n{err2}");
    assert!(err1.contains("clients.max_clients = 0"), "{err1}");
    assert_eq!(error_lines(&err1), error_lines(&err2));

    let help = Command::new(&sluiced).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("--check-config [<FILE>]"), "{help}");
    assert!(help.contains("--config FILE --check-config"), "{help}");
}

/// `device.backend = "cuda"` where start-up cannot drive it (a build
/// without the CUDA backend, or no driver) fails `--check-config` with the
/// message start-up gives, fallback or not; with `device.fallback = "sim"`
/// on a CUDA build without a driver both go on with the simulated GPU.
#[test]
fn check_config_refuses_cuda_exactly_as_start_up_does() {
    let _w = sluice_tests::watchdog("check_config_refuses_cuda_exactly_as_start_up_does", 240);
    let Some(sluiced) = sluiced_or_skip("check_config_cuda") else {
        return;
    };
    let dir = TestDir::new("checkcuda");
    let socket = dir.join("sluiced.sock");
    for (k, fallback) in ["none", "sim"].into_iter().enumerate() {
        let file = dir.join(&format!("cuda-{fallback}.toml"));
        std::fs::write(
            &file,
            format!(
                "[daemon]\nsocket = {:?}\nrealtime_priority = 0\nlock_memory = false\n\n\
                 [device]\nbackend = \"cuda\"\nfallback = \"{fallback}\"\nmodel_scale = \"small\"\n",
                socket.display().to_string()
            ),
        )
        .unwrap();
        let f = file.as_os_str();
        let (check_code, check_out, check_err) = run_sluiced(
            &sluiced,
            &dir,
            &format!("check{k}"),
            &["--check-config".as_ref(), f],
        );
        if check_code == Some(0) {
            // A CUDA build: a driver answered, or none did and the
            // fallback serves the simulated GPU.
            assert!(
                check_out.contains("# device: CUDA: ")
                    || (fallback == "sim"
                        && check_out.contains("# device: the simulated GPU (no CUDA driver")
                        && check_err.contains("serving the simulated GPU instead")),
                "fallback = {fallback}: {check_out}\n{check_err}"
            );
            eprintln!("fallback = {fallback}: --check-config accepts it here: {check_out}");
            continue;
        }
        assert_eq!(check_code, Some(2), "{check_err}");
        let check_lines = error_lines(&check_err);
        let first = check_lines.first().copied().unwrap_or_default();
        let not_built = "sluiced: error: device.backend = \"cuda\", but this build does not \
                         include the CUDA backend; rebuild with `--features cuda`";
        let no_driver = "sluiced: error: device.backend = \"cuda\", but no CUDA driver or \
                         device answers on this machine; fix the cause below, or set \
                         device.fallback = \"sim\"";
        assert!(
            first.starts_with(not_built) || (fallback == "none" && first.starts_with(no_driver)),
            "fallback = {fallback}: {check_err}"
        );
        let (start_code, _, start_err) = run_sluiced(
            &sluiced,
            &dir,
            &format!("start{k}"),
            &["--config".as_ref(), f],
        );
        assert_eq!(start_code, check_code, "{start_err}");
        assert_eq!(
            error_lines(&start_err),
            check_lines,
            "start-up and --check-config disagree:\n{start_err}\n---\n{check_err}"
        );
        assert!(!socket.exists(), "start-up got as far as the socket");
    }
}
