use harness::Context;

#[derive(Context)]
struct Deps {
    #[slot(fixed)]
    prompt: String,
    model: String,
    #[slot(later)]
    user: String,
}

fn main() {}
