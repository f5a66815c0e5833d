use harness::HarnessState;

#[derive(HarnessState)]
enum State {
    A,
    B,
}

fn main() {}
