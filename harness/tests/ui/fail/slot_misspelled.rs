use harness::Context;

#[derive(Context)]
struct Deps {
    #[slot(run)]
    punctuation: char,
}

fn main() {
    let _ = DepsRun { punctuatoin: '!' };
}
