use harness::Context;

#[derive(Context)]
struct Deps {
    #[slot(fixed)]
    prefix: String,
}

fn main() {
    let _ = DepsFixed { prefix: "Hello" };
}
