//! The decoder's recursion is bounded by the header's msgpack nesting (`max_nesting`, 512):
//! a recursive schema type nested as deep as that decodes on a thread with a 2 MiB stack
//! (a test thread's, and the smallest a platform thread usually gets) in the build that
//! runs the tests, and one level deeper is a `DecodeError`, not a stack overflow.

use mmcodec::msgpack::write;
use mmcodec::Limits;
use mmcodec_golden::features::Expr;

/// `-(-(...(1)))`, `depth` negations: each a union value, one msgpack array deeper.
fn negations(depth: usize) -> Vec<u8> {
    let mut out = Vec::new();
    write::array(&mut out, 8);
    write::str(&mut out, "mmc");
    write::uint(&mut out, 2);
    write::str(&mut out, "features");
    write::uint(&mut out, 3);
    write::str(&mut out, "Expr");
    write::array(&mut out, 0);
    write::array(&mut out, 0);
    for _ in 0..depth {
        write::array(&mut out, 2); // [2 (Neg), operand]
        write::uint(&mut out, 2);
    }
    write::array(&mut out, 2); // [0 (Lit), 1]
    write::uint(&mut out, 0);
    write::uint(&mut out, 1);
    out
}

fn decode_on_small_stack(header: Vec<u8>) -> Result<(), String> {
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            mmcodec::decode::<Expr>(&[&header])
                .map(drop)
                .map_err(|e| e.to_string())
        })
        .expect("a thread")
        .join()
        .expect("no stack overflow, no panic")
}

#[test]
fn the_deepest_message_the_limit_allows_decodes_on_a_small_stack() {
    // The envelope is one level; the Lit at the bottom another.
    let deepest = Limits::DEFAULT.max_nesting - 2;
    decode_on_small_stack(negations(deepest)).expect("within max_nesting");
    let error = decode_on_small_stack(negations(deepest + 1)).unwrap_err();
    assert_eq!(error, "$: message nested too deeply");
}
