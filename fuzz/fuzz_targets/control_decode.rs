//! Control-frame decoding (`shm_proto::control::Msg`): the daemon decodes
//! every frame a peer sends on the control socket, before and after the
//! hello. Any bytes must decode to a message or an error, never panic; a
//! message that decodes must encode back and decode to the same message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shm_proto::control::Msg;

fuzz_target!(|data: &[u8]| {
    if let Some(prefix) = data.first_chunk::<4>() {
        let _ = Msg::body_len(*prefix);
    }
    let _ = Msg::peek_hello_version(data);
    let Ok(msg) = Msg::decode(data) else {
        return;
    };
    // Encoding adds the 4-byte length prefix; the body is what was decoded
    // (the reserved half-word aside, which decoding ignores).
    let mut buf = vec![0u8; data.len() + 4];
    let n = msg
        .encode(&mut buf)
        .expect("a decoded message fits the size it was decoded from, plus its prefix");
    let prefix = *buf.first_chunk::<4>().unwrap();
    assert_eq!(Msg::body_len(prefix).ok(), Some(n - 4), "{msg:?}");
    assert_eq!(Msg::decode(&buf[4..n]), Ok(msg));
    assert_eq!(
        n - 4,
        data.len(),
        "{msg:?} re-encoded to a different length"
    );
});
