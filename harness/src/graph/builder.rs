//! The fluent loop builder.

use super::compiled::{Branches, CompiledFork, CompiledStep, Exits, HarnessInner, Target};
use super::def::{self, BranchFailure, BranchesDef, Dest, ForkDef, RetryPolicy, StepDef, TypeTag};
use super::harness::Harness;
use super::validate::{self, LoopValidationError, Violation};
use crate::effect::EffectJournal;
use crate::observe::Observer;
use crate::session::{SessionConfig, SessionStore};
use crate::signal::Signal;
use crate::slots::{Context, NoSlots};
use crate::state::HarnessState;
use crate::step::{Cx, StepFn, StepResult};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// The shortest lease a harness accepts ([`SessionConfig::lease_ttl`]).
pub const MIN_LEASE_TTL: Duration = Duration::from_millis(30);

impl<S: HarnessState, C: Context> Harness<S, C> {
    /// Starts building a loop over state `S` with context `C`, whose
    /// context has no fixed slots (give those with
    /// [`builder_with`](Self::builder_with)).
    pub fn builder() -> HarnessBuilder<S, C>
    where
        C::Fixed: NoSlots,
    {
        HarnessBuilder::new(C::Fixed::none())
    }

    /// Starts building a loop over state `S` with context `C`, with the
    /// context's fixed slots, shared by every agent created from it.
    ///
    /// ```
    /// use harness::{Context, Cx, Harness, HarnessState, JsonSchema, StepResult, schemars};
    /// # use serde::{Deserialize, Serialize};
    /// #[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
    /// struct Reply {
    ///     text: String,
    /// }
    ///
    /// #[derive(Context)]
    /// struct Deps {
    ///     #[slot(fixed)]
    ///     greeting: String,
    /// }
    ///
    /// async fn greet(cx: Cx<Deps>) -> StepResult<ReplyUpdate> {
    ///     Ok(ReplyUpdate::new().text(cx.greeting.clone()))
    /// }
    ///
    /// let harness = Harness::<Reply, Deps>::builder_with(DepsFixed { greeting: "hi".into() })
    ///     .step("greet").run(greet).end()
    ///     .start("greet")
    ///     .build()?;
    /// # Ok::<(), harness::LoopValidationError>(())
    /// ```
    pub fn builder_with(fixed: C::Fixed) -> HarnessBuilder<S, C> {
        HarnessBuilder::new(fixed)
    }
}

/// Builds a [`Harness`]: declare steps, transitions and the start step,
/// then [`build`](HarnessBuilder::build) it. Start one with
/// [`Harness::builder`] or [`Harness::builder_with`].
pub struct HarnessBuilder<S: HarnessState, C: Context = ()> {
    steps: Vec<StepDef<S, C>>,
    start: Option<String>,
    fixed: C::Fixed,
    observers: Vec<Arc<dyn Observer<S>>>,
    step_limit: u64,
    deadline: Option<Duration>,
    store: Option<Arc<dyn SessionStore>>,
    effects: Option<Arc<dyn EffectJournal>>,
    session_config: SessionConfig,
}

impl<S: HarnessState, C: Context> fmt::Debug for HarnessBuilder<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HarnessBuilder")
            .field(
                "steps",
                &self.steps.iter().map(|s| &s.name).collect::<Vec<_>>(),
            )
            .field("start", &self.start)
            .finish_non_exhaustive()
    }
}

/// The default step limit: generous for real agents, finite for runaway loops.
pub const DEFAULT_STEP_LIMIT: u64 = 10_000;

/// The default [`deadline`](HarnessBuilder::deadline) of a run: an hour from
/// when it starts or resumes. Long enough for real work with a slow model,
/// finite for a model that answers without end or a tool that hangs.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(60 * 60);

impl<S: HarnessState, C: Context> HarnessBuilder<S, C> {
    fn new(fixed: C::Fixed) -> Self {
        Self {
            steps: Vec::new(),
            start: None,
            fixed,
            observers: Vec::new(),
            step_limit: DEFAULT_STEP_LIMIT,
            deadline: Some(DEFAULT_DEADLINE),
            store: None,
            effects: None,
            session_config: SessionConfig::default(),
        }
    }

    /// Declares a step named `name`; configure it on the returned builder.
    pub fn step(self, name: impl Into<String>) -> StepBuilder<S, C> {
        StepBuilder {
            harness: self,
            step: StepDef {
                name: name.into(),
                run: None,
                route: None,
                on: Vec::new(),
                next: None,
                timeout: None,
                retry: RetryPolicy::default(),
                writes: None,
                input: None,
                sub: None,
                cache_without_run: false,
                twice: Vec::new(),
            },
        }
    }

    /// The step every run starts at.
    #[must_use]
    pub fn start(mut self, name: impl Into<String>) -> Self {
        self.start = Some(name.into());
        self
    }

    /// Adds an observer of every run of every agent of this harness.
    #[must_use]
    pub fn observer(mut self, observer: impl Observer<S> + 'static) -> Self {
        self.observers.push(Arc::new(observer));
        self
    }

    /// The most steps one run may take before it fails with
    /// [`RunError::StepLimit`](crate::RunError::StepLimit)
    /// (default [`DEFAULT_STEP_LIMIT`]).
    #[must_use]
    pub fn step_limit(mut self, limit: u64) -> Self {
        self.step_limit = limit;
        self
    }

    /// The longest one run may go on, from when it starts or resumes until
    /// it settles (default [`DEFAULT_DEADLINE`]). A run past it fails with
    /// [`RunError::Deadline`](crate::RunError::Deadline): the step waiting
    /// then is cancelled (its future dropped, as by a step's own
    /// [`timeout`](StepBuilder::timeout)) and is not retried (a step that
    /// never waits cannot be cut; the [`step_limit`](Self::step_limit)
    /// bounds a loop of those); with a store,
    /// the session records the failure at that step, and the steps before
    /// it stay committed. Time waiting for a human does not count: a run
    /// that interrupts has settled, and its resume starts a new deadline.
    ///
    /// ```
    /// use std::time::Duration;
    /// # use harness::{Harness, HarnessState, JsonSchema, schemars};
    /// # #[derive(Clone, Debug, serde::Serialize, serde::Deserialize, JsonSchema, HarnessState)]
    /// # struct S { n: u32 }
    /// let harness = Harness::<S>::builder()
    ///     .step("work")
    ///     .run(|_s, _cx| async { Ok(SUpdate::new()) })
    ///     .end()
    ///     .start("work")
    ///     .deadline(Duration::from_secs(10 * 60))
    ///     .build()?;
    /// # let _ = harness;
    /// # Ok::<(), harness::LoopValidationError>(())
    /// ```
    #[must_use]
    pub fn deadline(mut self, limit: Duration) -> Self {
        self.deadline = Some(limit);
        self
    }

    /// Runs may go on for as long as they take: no
    /// [`deadline`](HarnessBuilder::deadline).
    #[must_use]
    pub fn without_deadline(mut self) -> Self {
        self.deadline = None;
        self
    }

    /// Persists every run in `store`: a checkpoint at every step boundary,
    /// so a run can be resumed in another process. The store can be shared
    /// by several harnesses and agents.
    #[must_use]
    pub fn store(mut self, store: impl SessionStore + 'static) -> Self {
        self.store = Some(Arc::new(store));
        self
    }

    /// Journals the side effects of every run (`cx.once`, `cx.try_once`)
    /// in `journal` as well as in the session: for a durable-execution
    /// engine that replays runs by call order. See [`crate::effect`].
    #[must_use]
    pub fn effects(mut self, journal: impl EffectJournal + 'static) -> Self {
        self.effects = Some(Arc::new(journal));
        self
    }

    /// How runs are persisted: durability, snapshot interval, lease length.
    #[must_use]
    pub fn session_config(mut self, config: SessionConfig) -> Self {
        self.session_config = config;
        self
    }

    /// Settings no run can work with.
    fn invalid_settings(&self) -> Vec<Violation> {
        let mut found = Vec::new();
        if self.step_limit == 0 {
            found.push(Violation::InvalidSetting {
                setting: "step_limit".into(),
                reason: "0: no run could take a single step".into(),
            });
        }
        if self.deadline == Some(Duration::ZERO) {
            found.push(Violation::InvalidSetting {
                setting: "deadline".into(),
                reason: "0s: every run would fail before its first step; use .without_deadline() for none".into(),
            });
        }
        let ttl = self.session_config.lease_ttl;
        if ttl < MIN_LEASE_TTL {
            found.push(Violation::InvalidSetting {
                setting: "session_config.lease_ttl".into(),
                reason: format!(
                    "{ttl:?}: a lease is renewed every third of it, so it must be at least {MIN_LEASE_TTL:?}"
                ),
            });
        }
        found
    }

    /// Validates the loop and builds it. Every violation is reported at once.
    pub fn build(self) -> Result<Harness<S, C>, LoopValidationError> {
        let settings = self.invalid_settings();
        let start = match validate::validate::<S, C>(&self.steps, self.start.as_deref()) {
            Ok(start) if settings.is_empty() => start,
            Ok(_) => {
                return Err(LoopValidationError {
                    violations: settings,
                });
            }
            Err(mut e) => {
                e.violations.extend(settings);
                return Err(e);
            }
        };
        let index = |name: &str| {
            self.steps
                .iter()
                .position(|s| s.name == name)
                .unwrap_or_default()
        };
        let mut forks: Vec<CompiledFork<S>> = Vec::new();
        let mut target = |dest: &Dest<S>, id: String| match dest {
            Dest::Step(name) => Target::Step(index(name)),
            Dest::End => Target::End,
            Dest::Fork(fork) => {
                let branches = match &fork.branches {
                    BranchesDef::Static(names) => {
                        Branches::Static(names.iter().map(|n| index(n)).collect())
                    }
                    BranchesDef::Each { step, inputs, .. } => Branches::Each {
                        step: index(step),
                        inputs: Arc::clone(inputs),
                        max: fork.max_branches.unwrap_or(super::MAX_BRANCHES),
                    },
                };
                forks.push(CompiledFork {
                    id,
                    branches,
                    join: index(&fork.join),
                    limit: fork.limit.unwrap_or(usize::MAX),
                    collect: fork.collect.clone(),
                });
                Target::Fork(forks.len() - 1)
            }
        };
        let exits: Vec<Exits> = self
            .steps
            .iter()
            .map(|s| match &s.next {
                Some(next) => Exits::Next(target(next, s.name.clone())),
                None => Exits::On(
                    s.on.iter()
                        .map(|(sig, dest)| (sig.clone(), target(dest, format!("{}/{sig}", s.name))))
                        .collect(),
                ),
            })
            .collect();
        let steps = self
            .steps
            .into_iter()
            .zip(exits)
            .map(|(s, exits)| CompiledStep {
                name: Arc::from(s.name),
                run: s.run,
                route: s.route,
                exits,
                timeout: s.timeout,
                retry: s.retry,
                writes: s.writes,
                sub: s.sub,
            })
            .collect();
        Ok(Harness {
            inner: Arc::new(HarnessInner {
                steps,
                forks,
                start,
                fixed: self.fixed,
                observers: self.observers,
                step_limit: self.step_limit,
                deadline: self.deadline,
                store: self.store,
                effects: self.effects,
                session_config: self.session_config,
            }),
        })
    }
}

/// Configures one step; every [`HarnessBuilder`] method is also here, and
/// ends this step's declaration.
pub struct StepBuilder<S: HarnessState, C: Context = ()> {
    pub(crate) harness: HarnessBuilder<S, C>,
    pub(crate) step: StepDef<S, C>,
}

impl<S: HarnessState, C: Context> fmt::Debug for StepBuilder<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StepBuilder")
            .field("step", &self.step.name)
            .finish_non_exhaustive()
    }
}

impl<S: HarnessState, C: Context> StepBuilder<S, C> {
    /// The step's async body: reads the state and the context, returns a
    /// partial update. This is the only place the state changes.
    ///
    /// `f` is an async fn (or a closure returning a future) taking the
    /// state, the context, both or nothing: see [`StepFn`] for the shapes.
    #[must_use]
    pub fn run<Args, F: StepFn<S, C, Args>>(mut self, f: F) -> Self {
        let already =
            self.step.run.is_some() && !self.step.cache_without_run || self.step.sub.is_some();
        self.step.again(already, def::BODY);
        self.step.run = Some(Arc::new(move |s, cx| f.call(s, cx)));
        self
    }

    /// The body of a step that a fan-out starts
    /// ([`fan_out`](Self::fan_out)): like [`run`](Self::run), with the
    /// branch's own input first. The input's type must be the one the
    /// fan-out sends, which is checked when the loop is built; such a step
    /// can only be started by a fan-out.
    ///
    /// `f` takes the input, the state and the context, each named with its
    /// type: `|item: String, s: Arc<State>, cx: Cx<()>| async move { .. }`.
    #[must_use]
    pub fn run_each<I, F, Fut>(mut self, f: F) -> Self
    where
        I: DeserializeOwned + Send + 'static,
        F: Fn(I, Arc<S>, Cx<C>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = StepResult<S::Update>> + Send + 'static,
    {
        let f = Arc::new(f);
        let already =
            self.step.run.is_some() && !self.step.cache_without_run || self.step.sub.is_some();
        self.step.again(already, def::BODY);
        self.step.input = Some(TypeTag::of::<I>());
        self.step.run = Some(Arc::new(move |s, cx: Cx<C>| {
            let f = Arc::clone(&f);
            Box::pin(async move {
                let input: I = cx.input()?;
                f(input, s, cx).await
            })
        }));
        self
    }

    /// Declares the fields this step's updates may set. Inside parallel
    /// branches it is what the loop is checked by when built: a field that
    /// two branches may write must have a reducer that merges (a step
    /// that does not declare its writes may write any field). An update
    /// that sets another field fails the step with
    /// [`RunError::UndeclaredWrite`](crate::RunError::UndeclaredWrite).
    #[must_use]
    pub fn writes<'a>(mut self, fields: impl IntoIterator<Item = &'a str>) -> Self {
        self.step.writes = Some(fields.into_iter().map(str::to_string).collect());
        self
    }

    /// After `run`, continue in several branches at once, one starting at
    /// each of `steps`; declare with [`ForkBuilder::join`] the step that runs
    /// once all of them have reached it. See the guide's chapter on
    /// parallel branches.
    pub fn fork<I, N>(self, steps: I) -> ForkBuilder<S, C>
    where
        I: IntoIterator<Item = N>,
        N: Into<String>,
    {
        ForkBuilder::new(
            self,
            None,
            BranchesDef::Static(steps.into_iter().map(Into::into).collect()),
        )
    }

    /// After `run`, start one branch at `step` per item that `inputs`
    /// makes from the state (map-reduce); `step` gets its item through
    /// [`run_each`](Self::run_each). Declare with [`ForkBuilder::join`] the
    /// step that runs once every branch has reached it.
    pub fn fan_out<I, F>(self, step: impl Into<String>, inputs: F) -> ForkBuilder<S, C>
    where
        I: Serialize + 'static,
        F: Fn(&S) -> Vec<I> + Send + Sync + 'static,
    {
        ForkBuilder::new(self, None, each(step.into(), inputs))
    }

    /// The step's pure router: reads the state after `run` and returns the
    /// signal that picks the transition (declared with [`on`](Self::on)).
    #[must_use]
    pub fn route<F, R>(mut self, f: F) -> Self
    where
        F: Fn(&S) -> R + Send + Sync + 'static,
        R: Into<Signal>,
    {
        self.step.again(self.step.route.is_some(), def::ROUTER);
        self.step.route = Some(Arc::new(move |s| f(s).into()));
        self
    }

    /// Declares what happens when `route` returns `signal`.
    pub fn on(self, signal: impl Into<Signal>) -> OnBuilder<S, C> {
        OnBuilder {
            step: self,
            signal: signal.into(),
        }
    }

    /// After `run`, always continue at `step` (no `route`, no `on`).
    #[must_use]
    pub fn next(mut self, step: impl Into<String>) -> Self {
        self.step.again(self.step.next.is_some(), def::AFTER_RUN);
        self.step.next = Some(Dest::Step(step.into()));
        self
    }

    /// After `run`, always end the run (no `route`, no `on`); its outcome's
    /// signal is [`Signal::END`].
    #[must_use]
    pub fn end(mut self) -> Self {
        self.step.again(self.step.next.is_some(), def::AFTER_RUN);
        self.step.next = Some(Dest::End);
        self
    }

    /// Fails an attempt of `run` that takes longer than `limit`; on a
    /// sub-agent step (`.sub_agent`), its sub-agent's whole run (its own
    /// steps retry as they declare; the step does not). A sub-agent also
    /// keeps its own harness's deadline, from when it starts or resumes,
    /// where that falls before its parent's.
    #[must_use]
    pub fn timeout(mut self, limit: Duration) -> Self {
        self.step.timeout = Some(limit);
        self
    }

    /// Retries a failing `run` by this policy.
    #[must_use]
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.step.retry = policy;
        self
    }

    fn finish(mut self) -> HarnessBuilder<S, C> {
        self.harness.steps.push(self.step);
        self.harness
    }

    /// Ends this step and declares the next one.
    pub fn step(self, name: impl Into<String>) -> StepBuilder<S, C> {
        self.finish().step(name)
    }

    /// Ends this step; see [`HarnessBuilder::start`].
    #[must_use]
    pub fn start(self, name: impl Into<String>) -> HarnessBuilder<S, C> {
        self.finish().start(name)
    }

    /// Ends this step; see [`HarnessBuilder::observer`].
    #[must_use]
    pub fn observer(self, observer: impl Observer<S> + 'static) -> HarnessBuilder<S, C> {
        self.finish().observer(observer)
    }

    /// Ends this step; see [`HarnessBuilder::deadline`].
    #[must_use]
    pub fn deadline(self, limit: Duration) -> HarnessBuilder<S, C> {
        self.finish().deadline(limit)
    }

    /// Ends this step; see [`HarnessBuilder::without_deadline`].
    #[must_use]
    pub fn without_deadline(self) -> HarnessBuilder<S, C> {
        self.finish().without_deadline()
    }

    /// Ends this step; see [`HarnessBuilder::step_limit`].
    #[must_use]
    pub fn step_limit(self, limit: u64) -> HarnessBuilder<S, C> {
        self.finish().step_limit(limit)
    }

    /// Ends this step; see [`HarnessBuilder::store`].
    #[must_use]
    pub fn store(self, store: impl SessionStore + 'static) -> HarnessBuilder<S, C> {
        self.finish().store(store)
    }

    /// Ends this step; see [`HarnessBuilder::effects`].
    #[must_use]
    pub fn effects(self, journal: impl EffectJournal + 'static) -> HarnessBuilder<S, C> {
        self.finish().effects(journal)
    }

    /// Ends this step; see [`HarnessBuilder::session_config`].
    #[must_use]
    pub fn session_config(self, config: SessionConfig) -> HarnessBuilder<S, C> {
        self.finish().session_config(config)
    }

    /// Ends this step; see [`HarnessBuilder::build`].
    pub fn build(self) -> Result<Harness<S, C>, LoopValidationError> {
        self.finish().build()
    }
}

fn each<S: HarnessState, I, F>(step: String, inputs: F) -> BranchesDef<S>
where
    I: Serialize + 'static,
    F: Fn(&S) -> Vec<I> + Send + Sync + 'static,
{
    BranchesDef::Each {
        step,
        inputs: Arc::new(move |s| {
            inputs(s)
                .iter()
                .enumerate()
                .map(|(i, item)| {
                    serde_json::to_value(item)
                        .map_err(|e| format!("input #{i} cannot be serialized: {e}"))
                })
                .collect()
        }),
        input: TypeTag::of::<I>(),
    }
}

/// A fork being declared: its branches are known; give the step they join
/// at with [`join`](Self::join).
pub struct ForkBuilder<S: HarnessState, C: Context = ()> {
    step: StepBuilder<S, C>,
    via: Option<Signal>,
    branches: BranchesDef<S>,
    limit: Option<usize>,
    max_branches: Option<usize>,
    collect: Option<super::def::CollectFn<S>>,
}

impl<S: HarnessState, C: Context> fmt::Debug for ForkBuilder<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ForkBuilder")
            .field("step", &self.step.step.name)
            .field("via", &self.via)
            .finish_non_exhaustive()
    }
}

impl<S: HarnessState, C: Context> ForkBuilder<S, C> {
    fn new(step: StepBuilder<S, C>, via: Option<Signal>, branches: BranchesDef<S>) -> Self {
        Self {
            step,
            via,
            branches,
            limit: None,
            max_branches: None,
            collect: None,
        }
    }

    /// Runs at most `n` branches at once (default: all of them). Under an
    /// effect journal that replays by order
    /// ([`EffectJournal::ordered`](crate::effect::EffectJournal::ordered),
    /// Restate's), every branch runs and at most `n` of their effects run
    /// at once, and at most `n` of their model calls made with
    /// [`Cx::complete`](crate::Cx::complete) (which are not journaled);
    /// what a branch does outside `cx` is not bounded there.
    #[must_use]
    pub fn limit(mut self, n: usize) -> Self {
        self.limit = Some(n);
        self
    }

    /// A fan-out starts at most `n` branches (default
    /// [`MAX_BRANCHES`](crate::MAX_BRANCHES), 1 000): state with
    /// more inputs fails the run with [`RunError::FanOut`](crate::RunError::FanOut)
    /// at the fanning step, before any branch starts or anything is
    /// written. The inputs come from the state, which a model's answers
    /// fill: the bound keeps a list a model made too long from becoming as
    /// many tasks, each branch's input kept in the session. Raise it when a
    /// fan-out is meant to be that wide, and the run's
    /// [`step_limit`](HarnessBuilder::step_limit) with it: every branch's
    /// steps count towards that limit. A [`fork`](StepBuilder::fork)'s
    /// branches are the steps it names; this does not apply to them.
    #[must_use]
    pub fn max_branches(mut self, n: usize) -> Self {
        self.max_branches = Some(n);
        self
    }

    /// A branch that fails (after its step's retries) does not fail the
    /// run: `f` turns its failure into an update, merged at the join in
    /// the branch's place. Without this, the first failing branch fails
    /// the run and the other branches are cancelled. A branch cut short
    /// by the run's deadline is collected too, marked as such
    /// ([`BranchFailure::deadline`]); the store's and the lease's errors
    /// are the run's, never collected.
    ///
    /// The update stands in the branch's place: when its steps declare
    /// what they write ([`writes`](StepBuilder::writes)), a field whose
    /// reducer keeps one value (`replace`) may be set only if a step of the
    /// branch declares it (the build's check of parallel writes judged what
    /// the branch's steps declare: two failed branches would otherwise each
    /// set it, one value lost), else the run fails with
    /// [`RunError::UndeclaredCollectedWrite`](crate::RunError::UndeclaredCollectedWrite).
    /// A field that merges (`append`, `add`, …) may be set freely: collect
    /// failures into one.
    #[must_use]
    pub fn collect_errors<F>(mut self, f: F) -> Self
    where
        F: Fn(BranchFailure) -> S::Update + Send + Sync + 'static,
    {
        self.collect = Some(Arc::new(f));
        self
    }

    /// The step that runs once, when every branch has reached it, on the
    /// state with every branch's updates merged in branch order.
    pub fn join(mut self, step: impl Into<String>) -> StepBuilder<S, C> {
        let dest = Dest::Fork(Box::new(ForkDef {
            branches: self.branches,
            join: step.into(),
            limit: self.limit,
            max_branches: self.max_branches,
            collect: self.collect,
        }));
        match self.via {
            None => {
                let already = self.step.step.next.is_some();
                self.step.step.again(already, def::AFTER_RUN);
                self.step.step.next = Some(dest);
            }
            Some(signal) => self.step.step.on.push((signal, dest)),
        }
        self.step
    }
}

/// The target of one `.on(signal)` transition.
pub struct OnBuilder<S: HarnessState, C: Context = ()> {
    step: StepBuilder<S, C>,
    signal: Signal,
}

impl<S: HarnessState, C: Context> fmt::Debug for OnBuilder<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OnBuilder")
            .field("step", &self.step.step.name)
            .field("signal", &self.signal)
            .finish()
    }
}

impl<S: HarnessState, C: Context> OnBuilder<S, C> {
    /// On this signal, continue at `step`.
    pub fn to(mut self, step: impl Into<String>) -> StepBuilder<S, C> {
        self.step
            .step
            .on
            .push((self.signal, Dest::Step(step.into())));
        self.step
    }

    /// On this signal, end the run; the signal is the run's outcome.
    pub fn end(mut self) -> StepBuilder<S, C> {
        self.step.step.on.push((self.signal, Dest::End));
        self.step
    }

    /// On this signal, continue in several branches at once; see
    /// [`StepBuilder::fork`].
    pub fn fork<I, N>(self, steps: I) -> ForkBuilder<S, C>
    where
        I: IntoIterator<Item = N>,
        N: Into<String>,
    {
        ForkBuilder::new(
            self.step,
            Some(self.signal),
            BranchesDef::Static(steps.into_iter().map(Into::into).collect()),
        )
    }

    /// On this signal, start one branch per input; see
    /// [`StepBuilder::fan_out`].
    pub fn fan_out<I, F>(self, step: impl Into<String>, inputs: F) -> ForkBuilder<S, C>
    where
        I: Serialize + 'static,
        F: Fn(&S) -> Vec<I> + Send + Sync + 'static,
    {
        ForkBuilder::new(self.step, Some(self.signal), each(step.into(), inputs))
    }
}
