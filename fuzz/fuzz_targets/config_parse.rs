//! Config parsing (`sluice_service::config::Config::from_toml_str`, what
//! `Config::load` and `sluiced --check-config` run): any text must load or
//! give an error whose message can be printed, never panic; a config that
//! loads must print (`Config::summary`, shown by `--check-config`) as TOML
//! that loads back to the same config.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use sluice_service::config::Config;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let origin = Path::new("/etc/sluice/fuzz.toml");
    match Config::from_toml_str(text, origin) {
        Ok(c) => {
            let summary = c.summary();
            match Config::from_toml_str(&summary, origin) {
                Ok(back) => assert_eq!(back, c, "summary:\n{summary}\ninput:\n{text}"),
                Err(e) => {
                    panic!("summary does not load back: {e}\nsummary:\n{summary}\ninput:\n{text}")
                }
            }
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
