//! The same loop on Restate three ways, side by side:
//! `benchmarks/scripts/bench-restate` starts the servers and the services
//! and runs this program.
//!
//! One run is one new session making `--effects` K journaled effects, each
//! returning the time it ran:
//! - **bare**: the `Probe` virtual object of `restate-probe` (the official
//!   SDK, no harness), whose handler makes K `ctx.run` calls: the engine's
//!   own floor;
//! - **harness on Restate**: the `HarnessAgent` object of
//!   `restate-agent-probe`, a harness loop whose one step makes K `cx.once`
//!   calls, each journaled with `ctx.run`, the session loaded from and
//!   saved to the object's state;
//! - **harness on PostgreSQL workers**: the same loop on harness's own
//!   workers (`pg_workers --steps 1 --effects K`, the program next to this
//!   one), each `cx.once` written to the session in PostgreSQL.
//!
//! For each number of concurrent sessions N in `--levels`, Restate gets
//! rounds of N runs called at once through the ingress (as many rounds as
//! make `--min-runs` runs), and the workers get max(N, `--min-runs`)
//! sessions submitted at once, run by at most N (capped at
//! `--pg-workers` × `--pg-concurrency`) workers at a time. Figures:
//! - step latency: the time from one effect to the next in a run, from the
//!   effects' own clock readings (the same measure on all three);
//! - run/K: a run's duration as its caller sees it (the ingress call, from
//!   submission to answer), divided by K: what a step costs including the
//!   run's start and end (Restate only);
//! - effects/s: all effects over the wall time of the level.
//!
//! On Restate the bare handler and harness are measured `--repeat` times
//! (default 3), interleaved, and each figure is the median of its repeats;
//! the workers once.
//!
//! `restate_loop --ingress URL --admin URL --bare URI --agent URI --effects 5
//! --levels 1,100,1000 [--min-runs 100] [--pg-url URL] [--pg-workers 2]
//! [--pg-concurrency 32] [--repeat 3] [--bare-nodelay URI --agent-nodelay URI]
//! [--pids name=pid,…]`
//!
//! With `--bare-nodelay` and `--agent-nodelay` (the same services with
//! `PROBE_NODELAY=1`), both Restate sides are measured again on those.
//!
//! Without `--pg-url` the workers' side is left out. `--pids` names
//! processes (the server, the services) whose CPU time per effect is
//! printed for each measurement. A run that fails, or answers with another
//! number of effects, fails the program; timing is reported, never
//! asserted.

use harness::SessionId;
use harness_benchmarks::{arg, cpu_time_of, percentile, result};
use harness_restate::{Admin, AgentClient, Ingress, Reply};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// Which side of the comparison; `nodelay`: the services' connections set
/// `TCP_NODELAY`.
#[derive(Clone, Copy, PartialEq)]
enum Side {
    Bare { nodelay: bool },
    Harness { nodelay: bool },
    Workers,
}

impl Side {
    fn label(self) -> String {
        let (name, nodelay) = match self {
            Side::Bare { nodelay } => ("bare Restate handler", nodelay),
            Side::Harness { nodelay } => ("harness on Restate", nodelay),
            Side::Workers => return "harness on PG workers".to_owned(),
        };
        if nodelay {
            format!("{name}, nodelay")
        } else {
            name.to_owned()
        }
    }

    fn key(self) -> &'static str {
        match self {
            Side::Bare { nodelay: false } => "bare",
            Side::Bare { nodelay: true } => "bare_nodelay",
            Side::Harness { nodelay: false } => "restate",
            Side::Harness { nodelay: true } => "restate_nodelay",
            Side::Workers => "pg",
        }
    }

    /// The name given to its service process in `--pids`.
    fn process(self) -> &'static str {
        match self {
            Side::Bare { nodelay: false } => "bare",
            Side::Bare { nodelay: true } => "bare-nodelay",
            Side::Harness { nodelay: false } => "agent",
            Side::Harness { nodelay: true } => "agent-nodelay",
            Side::Workers => "",
        }
    }
}

/// What one side did at one level.
#[derive(Default)]
struct Figures {
    step_p50: f64,
    step_p99: f64,
    /// Run duration / K, from the caller; `None` for the workers.
    run_p50: Option<f64>,
    run_p99: Option<f64>,
    per_s: f64,
    /// CPU ms per effect of each named process, in the order of `--pids`.
    cpu: Vec<(String, f64)>,
}

impl Figures {
    /// Each figure the median of its values in `all`.
    fn median(all: Vec<Figures>) -> Figures {
        let mid = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v.get(v.len() / 2).copied().unwrap_or(0.0)
        };
        let of = |f: fn(&Figures) -> f64| mid(all.iter().map(f).collect());
        let opt = |f: fn(&Figures) -> Option<f64>| {
            let v: Vec<f64> = all.iter().filter_map(f).collect();
            (!v.is_empty()).then(|| mid(v))
        };
        let cpu = all.first().map_or_else(Vec::new, |first| {
            first
                .cpu
                .iter()
                .map(|(name, _)| {
                    let v = all
                        .iter()
                        .filter_map(|f| f.cpu.iter().find(|(n, _)| n == name).map(|(_, c)| *c))
                        .collect();
                    (name.clone(), mid(v))
                })
                .collect()
        });
        Figures {
            step_p50: of(|f| f.step_p50),
            step_p99: of(|f| f.step_p99),
            run_p50: opt(|f| f.run_p50),
            run_p99: opt(|f| f.run_p99),
            per_s: of(|f| f.per_s),
            cpu,
        }
    }
}

/// The clock reading at the end of an effect's line (`… at {µs}`).
fn clock(line: &str) -> Result<u64, Error> {
    line.rsplit(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("no clock reading at the end of the effect {line:?}").into())
}

fn clocks(lines: &[Value], k: usize, what: &str) -> Result<Vec<u64>, Error> {
    if lines.len() != k {
        return Err(format!("{what} made {} effects, not {k}: {lines:?}", lines.len()).into());
    }
    lines
        .iter()
        .map(|l| {
            l.as_str()
                .ok_or_else(|| Error::from(format!("{what}: an effect is not a string: {l}")))
                .and_then(clock)
        })
        .collect()
}

/// The CPU time (user and system) of process `pid` so far, in ms.
fn cpu_ms(pid: u32) -> Option<f64> {
    cpu_time_of(&pid.to_string()).map(|t| t.as_secs_f64() * 1000.0)
}

/// The machine's load averages, as `/proc/loadavg` gives them.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_owned())
}

/// The processes named by `--pids name=pid,…`.
fn pids(args: &[String]) -> Result<Vec<(String, u32)>, Error> {
    let spec: String = arg(args, "--pids", String::new());
    spec.split(',')
        .filter(|s| !s.is_empty())
        .map(|s| {
            let (name, pid) = s
                .split_once('=')
                .ok_or_else(|| format!("--pids: {s:?} is not name=pid"))?;
            Ok((
                name.to_owned(),
                pid.parse().map_err(|e| format!("--pids {s:?}: {e}"))?,
            ))
        })
        .collect()
}

/// CPU time of each process, measured around a piece of work.
struct CpuMeter<'a> {
    pids: &'a [(String, u32)],
    before: Vec<Option<f64>>,
}

impl<'a> CpuMeter<'a> {
    fn start(pids: &'a [(String, u32)]) -> Self {
        Self {
            pids,
            before: pids.iter().map(|(_, p)| cpu_ms(*p)).collect(),
        }
    }

    fn per_effect(&self, effects: usize) -> Vec<(String, f64)> {
        self.pids
            .iter()
            .zip(&self.before)
            .filter_map(|((name, pid), before)| {
                let used = cpu_ms(*pid)? - (*before)?;
                Some((name.clone(), used / effects.max(1) as f64))
            })
            .collect()
    }
}

/// One run on Restate: its duration as the caller saw it and its effects'
/// clock readings.
async fn one_run(
    side: Side,
    ingress: &Ingress,
    key: String,
    k: usize,
) -> Result<(Duration, Vec<u64>), Error> {
    let began = Instant::now();
    let lines = match side {
        Side::Bare { .. } => {
            let answer = ingress
                .call("Probe", Some(&key), "run", &json!({"steps": k}))
                .await?;
            answer["effects"].as_array().cloned().unwrap_or_default()
        }
        _ => {
            let reply = AgentClient::new(ingress.clone())
                .run(&SessionId::from(key.as_str()), &json!({}))
                .await?;
            match reply {
                Reply::Completed { state, .. } => {
                    state["log"].as_array().cloned().unwrap_or_default()
                }
                other => return Err(format!("run {key}: {other:?}").into()),
            }
        }
    };
    let took = began.elapsed();
    Ok((took, clocks(&lines, k, &format!("run {key}"))?))
}

/// Rounds of `n` runs at once on `side` until `min_runs` have run.
async fn restate_level(
    side: Side,
    ingress: &Ingress,
    n: usize,
    k: usize,
    min_runs: usize,
    tag: &str,
    pids: &[(String, u32)],
) -> Result<Figures, Error> {
    let rounds = min_runs.div_ceil(n).max(1);
    let mut runs = Vec::with_capacity(rounds * n);
    let meter = CpuMeter::start(pids);
    let began = Instant::now();
    for round in 0..rounds {
        let tasks: Vec<_> = (0..n)
            .map(|i| {
                let ingress = ingress.clone();
                let key = format!("{}-{tag}-{n}-{round}-{i}", side.key());
                tokio::spawn(async move { one_run(side, &ingress, key, k).await })
            })
            .collect();
        for t in tasks {
            runs.push(t.await??);
        }
    }
    let wall = began.elapsed().as_secs_f64();
    let effects = runs.len() * k;
    let cpu = meter.per_effect(effects);
    let mut per_step: Vec<f64> = runs
        .iter()
        .map(|(took, _)| took.as_secs_f64() * 1000.0 / k as f64)
        .collect();
    let mut gaps: Vec<f64> = runs
        .iter()
        .flat_map(|(_, c)| {
            c.windows(2)
                .map(|w| w[1].saturating_sub(w[0]) as f64 / 1000.0)
        })
        .collect();
    per_step.sort_by(f64::total_cmp);
    gaps.sort_by(f64::total_cmp);
    Ok(Figures {
        step_p50: percentile(&gaps, 50.0),
        step_p99: percentile(&gaps, 99.0),
        run_p50: Some(percentile(&per_step, 50.0)),
        run_p99: Some(percentile(&per_step, 99.0)),
        per_s: effects as f64 / wall,
        cpu,
    })
}

/// The same loop on harness's PostgreSQL workers: `pg_workers`, next to
/// this program, with one step of `k` effects per session.
fn workers_level(
    url: &str,
    n: usize,
    k: usize,
    min_runs: usize,
    processes: usize,
    per_process: usize,
) -> Result<Figures, Error> {
    let me = std::env::current_exe()?;
    let program = me.with_file_name("pg_workers");
    let sessions = n.max(min_runs);
    // At most n sessions at a time: that many workers, over the processes.
    let at_once = n.min(processes * per_process);
    let processes = processes.min(at_once).max(1);
    let concurrency = at_once.div_ceil(processes);
    let out = std::process::Command::new(&program)
        .args(["--url", url, "--steps", "1"])
        .args(["--effects", &k.to_string()])
        .args(["--sessions", &sessions.to_string()])
        .args(["--workers", &processes.to_string()])
        .args(["--concurrency", &concurrency.to_string()])
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("{}: {e}", program.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!("{} failed ({}): {stdout}", program.display(), out.status).into());
    }
    let figure = |name: &str| -> Result<f64, Error> {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("RESULT {name} ")))
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| format!("pg_workers printed no {name}: {stdout}").into())
    };
    for line in stdout.lines().filter(|l| !l.starts_with("RESULT ")) {
        eprintln!("  pg_workers: {line}");
    }
    Ok(Figures {
        step_p50: figure("pg_p50_ms")?,
        step_p99: figure("pg_p99_ms")?,
        run_p50: None,
        run_p99: None,
        per_s: figure("pg_wall_steps_per_s")?,
        cpu: Vec::new(),
    })
}

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}"))
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}x", a / b),
        _ => "-".to_owned(),
    }
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    let ingress_url: String = arg(&args, "--ingress", String::new());
    let admin_url: String = arg(&args, "--admin", String::new());
    let bare: String = arg(&args, "--bare", String::new());
    let agent: String = arg(&args, "--agent", String::new());
    let bare_nodelay: String = arg(&args, "--bare-nodelay", String::new());
    let agent_nodelay: String = arg(&args, "--agent-nodelay", String::new());
    let k: usize = arg(&args, "--effects", 5);
    let levels: String = arg(&args, "--levels", "1,100,1000".to_string());
    let min_runs: usize = arg(&args, "--min-runs", 100);
    let pg_url: String = arg(&args, "--pg-url", String::new());
    let pg_processes: usize = arg(&args, "--pg-workers", 2);
    let pg_per_process: usize = arg(&args, "--pg-concurrency", 32);
    let repeat: usize = arg(&args, "--repeat", 3);
    let mut pids = pids(&args)?;
    pids.push(("driver".to_owned(), std::process::id()));
    // Each measurement shows the server, its own service and the driver.
    let serving = |side: Side| -> Vec<(String, u32)> {
        pids.iter()
            .filter(|(n, _)| matches!(n.as_str(), "server" | "driver") || n == side.process())
            .cloned()
            .collect()
    };
    let levels: Vec<usize> = levels
        .split(',')
        .map(|l| l.trim().parse().map_err(|e| format!("--levels {l:?}: {e}")))
        .collect::<Result<_, _>>()?;
    if ingress_url.is_empty() || admin_url.is_empty() || bare.is_empty() || agent.is_empty() {
        return Err(
            "usage: restate_loop --ingress URL --admin URL --bare URI --agent URI \
                    [--bare-nodelay URI --agent-nodelay URI] [--effects K] \
                    [--levels 1,100,1000] [--pg-url URL]"
                .into(),
        );
    }
    // The services' pairs: as the SDK's `listen_and_serve` serves them,
    // and with TCP_NODELAY if given. Both pairs serve the same services, so
    // each is registered (made the one Restate calls) before it is measured.
    let mut pairs = vec![(false, bare, agent)];
    if !bare_nodelay.is_empty() && !agent_nodelay.is_empty() {
        pairs.push((true, bare_nodelay, agent_nodelay));
    }
    let admin = Admin::new(&admin_url)?;
    let register = async |bare: &str, agent: &str| -> Result<(), Error> {
        for (uri, service) in [(bare, "Probe"), (agent, "HarnessAgent")] {
            let services = admin.register(uri, true).await?;
            if !services.iter().any(|s| s == service) {
                return Err(format!("{uri} serves {services:?}, not {service}").into());
            }
        }
        Ok(())
    };
    let ingress = Ingress::new(&ingress_url, Duration::from_secs(300))?;
    let tag = format!("{}", std::process::id());
    let warm = levels.iter().copied().max().unwrap_or(1).min(50);

    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let load_before = load_average();
    let mut table: Vec<(usize, Side, Figures)> = Vec::new();
    for (nodelay, bare, agent) in &pairs {
        register(bare, agent).await?;
        let sides = [
            Side::Bare { nodelay: *nodelay },
            Side::Harness { nodelay: *nodelay },
        ];
        // Warm both services and the server's partitions up, unmeasured.
        for side in sides {
            restate_level(side, &ingress, warm, k, warm, &format!("{tag}w"), &[]).await?;
        }
        for &n in &levels {
            // The two sides interleaved, `repeat` times; each figure is
            // the median of its repeats.
            let mut repeats: [Vec<Figures>; 2] = [Vec::new(), Vec::new()];
            for r in 0..repeat {
                for (side, into) in sides.into_iter().zip(repeats.iter_mut()) {
                    let tag = format!("{tag}r{r}");
                    let f =
                        restate_level(side, &ingress, n, k, min_runs, &tag, &serving(side)).await?;
                    eprintln!(
                        "restate_loop: {n} sessions, {}: {:.0} effects/s, run/K p50 {} ms",
                        side.label(),
                        f.per_s,
                        ms(f.run_p50)
                    );
                    into.push(f);
                }
            }
            for (side, figures) in sides.into_iter().zip(repeats) {
                table.push((n, side, Figures::median(figures)));
            }
        }
    }
    // What a run writes besides its effects, for the reader of the table.
    let client = AgentClient::new(ingress.clone());
    let sized = SessionId::from(format!("restate-{tag}-size"));
    let reply = client.run(&sized, &json!({})).await?;
    let snapshot = client.session(&sized).await?;
    let bare_reply = ingress
        .call(
            "Probe",
            Some(&format!("bare-{tag}-size")),
            "run",
            &json!({"steps": k}),
        )
        .await?;
    let sizes = (
        serde_json::to_string(&snapshot)?.len(),
        serde_json::to_string(&reply)?.len(),
        bare_reply.to_string().len(),
    );
    if !pg_url.is_empty() {
        for &n in &levels {
            let f = workers_level(&pg_url, n, k, min_runs, pg_processes, pg_per_process)?;
            eprintln!(
                "restate_loop: {n} sessions, {}: {:.0} effects/s",
                Side::Workers.label(),
                f.per_s
            );
            table.push((n, Side::Workers, f));
        }
    }
    table.sort_by_key(|(n, _, _)| *n);
    let load_after = load_average();

    println!();
    println!(
        "The same loop, one run = one new session of K = {k} journaled effects, each returning \
         its clock: the bare handler's `ctx.run`s; a harness step's `cx.once`s on Restate; the \
         same on harness's PostgreSQL workers."
    );
    println!(
        "Each level: rounds of N runs called at once through the ingress until {min_runs} runs \
         (N = 1: {min_runs} runs one after the other), bare and harness interleaved {repeat} \
         times, each figure the median of the {repeat}; the workers: max(N, {min_runs}) sessions \
         submitted at once, at most min(N, {}) running at a time.",
        pg_processes * pg_per_process
    );
    println!(
        "One machine, {cores} cores shared by the Restate server, the services, PostgreSQL and \
         the driver (each measurement runs alone; the others idle). Release builds."
    );
    println!(
        "Load average (1, 5, 15 min) at the start: {load_before}; at the end: {load_after} \
         (above {cores}, other work shared the cores and the figures are skewed)."
    );
    println!(
        "The services as the SDK's `HttpServer::listen_and_serve` serves them (Nagle's algorithm \
         on), and (`nodelay`) with TCP_NODELAY on their connections."
    );
    println!(
        "step: from one effect to the next in a run (the effects' clocks); run/K: a run's \
         duration at the caller / K; effects/s: all effects / the level's wall time. Times in ms."
    );
    println!();
    println!(
        "{:>8}  {:<30}{:>9}{:>9}{:>10}{:>10}{:>11}   CPU ms per effect",
        "sessions", "", "step p50", "step p99", "run/K p50", "run/K p99", "effects/s"
    );
    for (n, side, f) in &table {
        let cpu: Vec<String> = f.cpu.iter().map(|(p, c)| format!("{p} {c:.2}")).collect();
        println!(
            "{n:>8}  {:<30}{:>9.2}{:>9.2}{:>10}{:>10}{:>11.0}   {}",
            side.label(),
            f.step_p50,
            f.step_p99,
            ms(f.run_p50),
            ms(f.run_p99),
            f.per_s,
            cpu.join(", ")
        );
        let p = format!("restate_loop_{}_{n}", side.key());
        result(&format!("{p}_step_p50_ms"), f.step_p50);
        result(&format!("{p}_step_p99_ms"), f.step_p99);
        if let (Some(a), Some(b)) = (f.run_p50, f.run_p99) {
            result(&format!("{p}_run_per_step_p50_ms"), a);
            result(&format!("{p}_run_per_step_p99_ms"), b);
        }
        result(&format!("{p}_effects_per_s"), f.per_s);
    }

    println!(
        "One run of K = {k} writes, besides its effects: harness, the session as saved ({} bytes \
         of JSON, set as the object's state: a loop of one task takes its ids and times from its \
         journal, so no `ctx.run` of its own journals the save) and its reply ({} bytes); the \
         bare handler, its reply ({} bytes).",
        sizes.0, sizes.1, sizes.2
    );
    println!();
    println!(
        "Ratios, as slowdowns of harness on Restate (latency: harness / other; throughput: \
         other / harness; target against the bare handler: <= 1.2x), against the bare handler \
         on the same sockets and against the PG workers:"
    );
    println!(
        "{:>8}  {:<10}{:>10}{:>10}{:>10}{:>10}{:>11}  |{:>9}{:>11}",
        "sessions",
        "sockets",
        "run/K p50",
        "run/K p99",
        "step p50",
        "step p99",
        "effects/s",
        "PG step",
        "PG eff/s"
    );
    let find = |n: usize, side: Side| table.iter().find(|(m, s, _)| *m == n && *s == side);
    for &n in &levels {
        for (nodelay, _, _) in &pairs {
            let (Some((_, _, h)), Some((_, _, b))) = (
                find(n, Side::Harness { nodelay: *nodelay }),
                find(n, Side::Bare { nodelay: *nodelay }),
            ) else {
                continue;
            };
            let w = find(n, Side::Workers).map(|(_, _, w)| w);
            println!(
                "{n:>8}  {:<10}{:>10}{:>10}{:>10}{:>10}{:>11}  |{:>9}{:>11}",
                if *nodelay { "nodelay" } else { "default" },
                ratio(h.run_p50, b.run_p50),
                ratio(h.run_p99, b.run_p99),
                ratio(Some(h.step_p50), Some(b.step_p50)),
                ratio(Some(h.step_p99), Some(b.step_p99)),
                ratio(Some(b.per_s), Some(h.per_s)),
                ratio(Some(h.step_p50), w.map(|w| w.step_p50)),
                ratio(w.map(|w| w.per_s), Some(h.per_s)),
            );
            let p = format!(
                "restate_loop_{}_{n}",
                Side::Harness { nodelay: *nodelay }.key()
            );
            if let (Some(hr), Some(br)) = (h.run_p50, b.run_p50) {
                result(&format!("{p}_vs_bare_run_p50"), hr / br);
            }
            result(&format!("{p}_vs_bare_throughput"), b.per_s / h.per_s);
            if let Some(w) = w {
                result(&format!("{p}_vs_pg_throughput"), w.per_s / h.per_s);
            }
        }
    }
    Ok(())
}
