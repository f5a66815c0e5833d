//! Compile-time behaviour of the derives: what must compile, and what must be
//! rejected with a clear message.

#[test]
fn derive_ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}
