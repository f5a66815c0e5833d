use harness::Context;

struct Connection;

#[derive(Context)]
struct Deps {
    #[slot(agent)]
    db: Connection,
}

fn main() {}
