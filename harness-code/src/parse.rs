//! Source to syntax tree, safely for any source: no input, however long or
//! deeply nested, may exhaust the stack of the thread that analyses it.
//!
//! Ruff's parser descends recursively, and the analysis walks the tree
//! recursively, so the stack they need grows with how deeply the code nests
//! (a chain of 200 000 `not`, a 200 000-term sum, a long `a if c else ...`
//! chain). Before parsing, [`units`] bounds that depth from above: every
//! level of the parser's recursion, and every level of the tree, consumes at
//! least one token that is not a name, number, plain string, `,`, `:`, `=`
//! or `;` (an operator, a bracket, a keyword or an indented line), so these
//! tokens plus the number of lines bound it. A source within the share of
//! stack assumed free on the caller's thread is parsed there; a larger one on
//! an analysis thread (kept between analyses, see [`pool`]) whose stack holds
//! [`MAX_UNITS`] of [`STACK_PER_UNIT`] bytes. A source over [`MAX_UNITS`] is
//! parsed one group of top-level statements at a time; a single statement
//! over it is refused with [`AnalysisError::TooComplex`].
//!
//! The bound is counted on the tokens as Ruff's lexer sees them before
//! parsing. The parser re-lexes in two kinds of recovery from syntax errors,
//! which can only add indented lines (counted as lines) unless the source
//! has a lexical error or a string nested inside an f-string's replacement
//! field; for those a bound counted on the bytes alone is used, which holds
//! for any tokenization. A property test checks the bound against the depth
//! of the trees of random token sequences, valid and not.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind};

use rustpython_ruff_python_ast::token::TokenKind;
use rustpython_ruff_python_ast::visitor::{self, Visitor};
use rustpython_ruff_python_ast::{
    self as ast, Expr, ExprContext, PySourceType, PythonVersion, Stmt,
};
use rustpython_ruff_python_parser::semantic_errors::{
    LazyImportContext, SemanticSyntaxChecker, SemanticSyntaxContext, SemanticSyntaxError,
    SemanticSyntaxErrorKind,
};
use rustpython_ruff_python_parser::{Mode, lexer, parse_unchecked_source};
use rustpython_ruff_text_size::{TextRange, TextSize};

use crate::analyze::AnalysisOptions;
use crate::error::{AnalysisError, NestingKind};

/// Stack bytes one unit of the bound may need. The most measured is 3.8 KiB
/// (a chain of lambdas with defaults, `lambda a=lambda a=...`, parsed and
/// walked in a debug build with the parser unoptimised) and 1.4 KiB
/// optimised, so this leaves a margin of four and of five.
const STACK_PER_UNIT: usize = if cfg!(debug_assertions) {
    16 << 10
} else {
    8 << 10
};

/// Stack for the frames below the recursion on a thread started here.
const BASE_STACK: usize = 1 << 20;

/// The stack of an analysis thread: reserved, not committed; only what the
/// recursion reaches is ever touched.
const MAX_STACK: usize = 1 << 30;

/// The most units one parse may have.
const MAX_UNITS: usize = MAX_STACK / STACK_PER_UNIT;

/// Units assumed to fit on a caller's thread: 256 KiB of stack, well within
/// the 2 MiB that Rust and tokio give their threads.
const CALLER_UNITS: usize = (256 << 10) / STACK_PER_UNIT;

/// Units the stack of diagnosis and patching threads holds (256 MiB).
const DEEP_UNITS: usize = (256 << 20) / STACK_PER_UNIT;

/// An analysis thread that ran a source of more units than this may have
/// touched that much stack; it ends rather than keep it.
const RETIRE_UNITS: usize = (256 << 20) / STACK_PER_UNIT;

/// Analysis threads kept waiting for work.
const IDLE_THREADS: usize = 4;

/// The largest source the parser accepts (its offsets are `u32`).
const MAX_BYTES: usize = u32::MAX as usize;

/// The largest source parsed in groups of statements (32 MiB).
const MAX_SPLIT_BYTES: usize = 32 << 20;

thread_local! {
    /// How many units of recursion the current thread's stack can take.
    static ALLOWANCE: Cell<usize> = const { Cell::new(CALLER_UNITS) };
}

/// Parses `source` and calls `f` with it and its syntax tree, on a stack
/// deep enough for both; the tree is dropped there too.
///
/// A source that parses but that CPython's compiler refuses (`return`
/// outside a function, ...; see [`check_compiles`]) is an
/// [`AnalysisError::Syntax`] too.
///
/// # Errors
///
/// [`AnalysisError::Syntax`], [`AnalysisError::TooDeeplyNested`],
/// [`AnalysisError::TooComplex`], [`AnalysisError::TooLarge`], or
/// [`AnalysisError::AnalysisThread`]/[`AnalysisError::ParserPanic`] when no
/// thread could be started or the parser failed.
pub(crate) fn with_module<T: Send + 'static>(
    source: &str,
    options: AnalysisOptions,
    f: fn(&str, &ast::ModModule) -> T,
) -> Result<T, AnalysisError> {
    check_shape(source)?;
    let plan = plan(source, mode(options))?;
    let parse = move |source: &str| {
        let module = parse_chunks(source, options, &plan.chunks)?;
        check_compiles(source, &module)?;
        let result = f(source, &module);
        drop(module);
        Ok(result)
    };
    if plan.units <= ALLOWANCE.get() {
        return catch_unwind(AssertUnwindSafe(|| parse(source)))
            .map_err(|payload| panic_error(&*payload))?;
    }
    let units = plan.units;
    let owned: Box<str> = source.into();
    let pooled = parse.clone();
    match pool::run(units, move || pooled(&owned)) {
        Ok(result) => result?,
        // No analysis thread could be started: one with just the stack
        // this source needs may still be.
        Err(pool::Unavailable) => run_with_units(units, || parse(source))?,
    }
}

/// Parses `source` on the current thread if its bound fits the thread's
/// stack; `None` if it does not, or if the source does not parse.
pub(crate) fn parse_here(source: &str, options: AnalysisOptions) -> Option<ast::ModModule> {
    check_shape(source).ok()?;
    if units(source, mode(options)) > ALLOWANCE.get() {
        return None;
    }
    let whole = 0..source.len();
    catch_unwind(AssertUnwindSafe(|| {
        parse_chunks(source, options, std::slice::from_ref(&whole))
    }))
    .ok()?
    .ok()
}

/// Runs `f` on a thread whose stack holds [`DEEP_UNITS`], so that the
/// sources it parses with [`parse_here`] may be large; on the current
/// thread if no thread can be started. A panic in `f` is resumed here.
pub(crate) fn on_deep_stack<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    on_stack(DEEP_UNITS, f)
}

/// Runs `f` on a new thread whose stack holds any analysis (1 GiB,
/// reserved, not committed), and returns its result.
///
/// Analysing code that is more than a line or two long needs more stack
/// than a caller's thread is assumed to have, so it runs on an analysis
/// thread of the crate, which costs a hand-over between threads (a few
/// microseconds, more on a busy machine). Within `f` every analysis runs in
/// place instead; a program that analyses much code, like the `harness`
/// command line, runs its work in here. Runs `f` on the current thread if
/// no thread can be started (analyses then hand over as usual). A panic in
/// `f` is resumed on the caller.
///
/// ```
/// let analyses = harness_code::with_analysis_stack(|| {
///     ["x = 1", "y = x + 1"].map(|cell| harness_code::analyze_cell(cell).unwrap())
/// });
/// assert_eq!(analyses[1].reads.iter().collect::<Vec<_>>(), ["x"]);
/// ```
pub fn with_analysis_stack<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    on_stack(MAX_UNITS, f)
}

/// Runs `f` where the stack holds `units`: here if the current thread's
/// allowance does, else on a new thread; here again if none can be started.
fn on_stack<T: Send>(units: usize, f: impl FnOnce() -> T + Send) -> T {
    if ALLOWANCE.get() >= units {
        return f();
    }
    let mut f = Some(f);
    let outcome = std::thread::scope(|scope| {
        let f = &mut f;
        std::thread::Builder::new()
            .name("harness-analysis".to_owned())
            .stack_size(stack_bytes(units))
            .spawn_scoped(scope, move || {
                ALLOWANCE.set(units);
                f.take().map(|f| f())
            })
            .ok()
            .map(|handle| handle.join())
    });
    match (outcome, f) {
        (Some(Ok(Some(value))), _) => value,
        (Some(Err(payload)), _) => std::panic::resume_unwind(payload),
        (_, Some(f)) => f(),
        (_, None) => unreachable!("the analysis thread took the function and returned nothing"),
    }
}

/// Analysis threads, kept between analyses: a thread's stack and its
/// allocator's caches stay warm, which makes analysing a typical source a
/// fifth faster than on a new thread.
mod pool {
    use std::panic::{AssertUnwindSafe, catch_unwind};
    use std::sync::mpsc::{self, Sender};
    use std::sync::{Mutex, PoisonError};

    use super::{ALLOWANCE, IDLE_THREADS, MAX_UNITS, RETIRE_UNITS, panic_error, stack_bytes};
    use crate::error::AnalysisError;

    /// Work for an analysis thread, and the units its source may need.
    struct Job {
        units: usize,
        run: Box<dyn FnOnce() + Send>,
    }

    /// Senders to the threads waiting for a job.
    static IDLE: Mutex<Vec<Sender<Job>>> = Mutex::new(Vec::new());

    /// No analysis thread could be started.
    #[derive(Debug)]
    pub(super) struct Unavailable;

    /// Runs `work` on an analysis thread, whose stack holds [`MAX_UNITS`];
    /// `units` is what it may need. A panic in `work` is
    /// [`AnalysisError::ParserPanic`].
    pub(super) fn run<T: Send + 'static>(
        units: usize,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<Result<T, AnalysisError>, Unavailable> {
        let (reply, answer) = mpsc::sync_channel(1);
        let mut job = Job {
            units,
            run: Box::new(move || {
                let result = catch_unwind(AssertUnwindSafe(work)).map_err(|p| panic_error(&*p));
                let _ = reply.send(result);
            }),
        };
        loop {
            let idle = IDLE.lock().unwrap_or_else(PoisonError::into_inner).pop();
            let Some(thread) = idle else {
                break;
            };
            match thread.send(job) {
                Ok(()) => return answer.recv().map_err(|_| Unavailable),
                // Only a waiting thread is listed; should one have ended,
                // the job comes back.
                Err(returned) => job = returned.0,
            }
        }
        std::thread::Builder::new()
            .name("harness-analysis".to_owned())
            .stack_size(stack_bytes(MAX_UNITS))
            .spawn(move || serve(job))
            .map_err(|_| Unavailable)?;
        answer.recv().map_err(|_| Unavailable)
    }

    /// An analysis thread: runs `first`, then waits for more work while
    /// fewer than [`IDLE_THREADS`] others wait; ends after a source that
    /// may have used much of its stack, rather than keep that memory.
    fn serve(first: Job) {
        ALLOWANCE.set(MAX_UNITS);
        let (sender, jobs) = mpsc::channel();
        let mut job = first;
        loop {
            let retire = job.units > RETIRE_UNITS;
            (job.run)();
            if retire {
                return;
            }
            {
                let mut idle = IDLE.lock().unwrap_or_else(PoisonError::into_inner);
                if idle.len() >= IDLE_THREADS {
                    return;
                }
                idle.push(sender.clone());
            }
            match jobs.recv() {
                Ok(next) => job = next,
                Err(_) => return,
            }
        }
    }
}

fn mode(options: AnalysisOptions) -> Mode {
    if options.ipython {
        Mode::Ipython
    } else {
        Mode::Module
    }
}

/// The checks that need no parser: size and CPython's nesting limits.
fn check_shape(source: &str) -> Result<(), AnalysisError> {
    if let Some(error) = size_error(source.len()) {
        return Err(error);
    }
    if let Some((offset, kind, limit)) = excessive_nesting(source) {
        let (line, column) = line_and_column(source, offset);
        return Err(AnalysisError::TooDeeplyNested {
            nesting: kind,
            line,
            column,
            limit,
        });
    }
    Ok(())
}

fn size_error(bytes: usize) -> Option<AnalysisError> {
    (bytes > MAX_BYTES).then_some(AnalysisError::TooLarge {
        bytes: bytes as u64,
        limit: MAX_BYTES as u64,
    })
}

/// Stack size of a thread that must hold `units`.
fn stack_bytes(units: usize) -> usize {
    units
        .saturating_mul(STACK_PER_UNIT)
        .saturating_add(BASE_STACK)
}

/// Runs `f` where the stack holds `units`: here if the current thread's
/// allowance does, else on a thread started with enough stack. A panic in
/// `f` (a parser bug) becomes [`AnalysisError::ParserPanic`].
fn run_with_units<T: Send>(units: usize, f: impl FnOnce() -> T + Send) -> Result<T, AnalysisError> {
    if units <= ALLOWANCE.get() {
        return catch_unwind(AssertUnwindSafe(f)).map_err(|payload| panic_error(&*payload));
    }
    std::thread::scope(|scope| {
        let handle = std::thread::Builder::new()
            .name("harness-analysis".to_owned())
            .stack_size(stack_bytes(units))
            .spawn_scoped(scope, move || {
                ALLOWANCE.set(units);
                f()
            })
            .map_err(|error| AnalysisError::AnalysisThread {
                message: error.to_string(),
            })?;
        handle.join().map_err(|payload| panic_error(&*payload))
    })
}

fn panic_error(payload: &(dyn std::any::Any + Send)) -> AnalysisError {
    let message = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_owned());
    AnalysisError::ParserPanic { message }
}

/// How a source is parsed: in these byte ranges, each within `units`.
#[derive(Debug, Clone)]
struct Plan {
    units: usize,
    chunks: Vec<Range<usize>>,
}

fn plan(source: &str, mode: Mode) -> Result<Plan, AnalysisError> {
    let whole = units(source, mode);
    if whole <= MAX_UNITS {
        return Ok(Plan {
            units: whole,
            chunks: std::iter::once(0..source.len()).collect(),
        });
    }
    // Each group is parsed after a comment as long as the source before
    // it, so that offsets stay those of the source: the work grows as the
    // square of the source's length, which is bounded here.
    if source.len() > MAX_SPLIT_BYTES {
        return Err(AnalysisError::TooLarge {
            bytes: source.len() as u64,
            limit: MAX_SPLIT_BYTES as u64,
        });
    }
    // Too much for one parse: groups of top-level statements, each group
    // parsed alone. Groups are formed by the byte bound, which adds up; a
    // statement over it alone is measured on its tokens (a statement starts
    // with fresh tokens: no bracket, string or block open).
    let mut plan = Plan {
        units: 0,
        chunks: Vec::new(),
    };
    let mut group: Option<(Range<usize>, usize)> = None;
    let bytes = source.as_bytes();
    let mut starts = statement_starts(source);
    starts.push(source.len());
    let mut start = 0;
    for end in starts {
        if end <= start {
            continue;
        }
        let statement = start..end;
        start = end;
        let units = byte_units(&bytes[statement.clone()]);
        if let Some((range, sum)) = &mut group
            && sum.saturating_add(units) <= MAX_UNITS
        {
            range.end = statement.end;
            *sum += units;
            continue;
        }
        if let Some((range, sum)) = group.take() {
            plan.units = plan.units.max(sum);
            plan.chunks.push(range);
        }
        if units <= MAX_UNITS {
            group = Some((statement, units));
            continue;
        }
        let text = source.get(statement.clone()).unwrap_or_default();
        let units = units_of_tokens(text, mode).unwrap_or(units);
        if units > MAX_UNITS {
            let (line, _) = line_and_column(source, first_code(bytes, statement.start));
            return Err(AnalysisError::TooComplex {
                line,
                units: units as u64,
                limit: MAX_UNITS as u64,
            });
        }
        plan.units = plan.units.max(units);
        plan.chunks.push(statement);
    }
    if let Some((range, sum)) = group {
        plan.units = plan.units.max(sum);
        plan.chunks.push(range);
    }
    Ok(plan)
}

/// Parses each range of `source` alone and joins their statements; the
/// first syntax error of any is the error.
fn parse_chunks(
    source: &str,
    options: AnalysisOptions,
    chunks: &[Range<usize>],
) -> Result<ast::ModModule, AnalysisError> {
    let source_type = if options.ipython {
        PySourceType::Ipynb
    } else {
        PySourceType::Python
    };
    let mut body = Vec::new();
    let mut first_error: Option<(TextSize, String)> = None;
    for chunk in chunks {
        let text;
        let text = if *chunk == (0..source.len()) {
            source
        } else {
            text = padded(source, chunk.clone());
            text.as_str()
        };
        let parsed = parse_unchecked_source(text, source_type);
        if let Some(error) = parsed.errors().iter().min_by_key(|e| e.location.start()) {
            let start = error.location.start();
            if first_error.as_ref().is_none_or(|(first, _)| start < *first) {
                first_error = Some((start, error.error.to_string()));
            }
        }
        body.extend(parsed.into_syntax().body);
    }
    if let Some((offset, message)) = first_error {
        let (line, column) = line_and_column(source, usize::from(offset));
        return Err(AnalysisError::Syntax {
            line,
            column,
            message,
        });
    }
    Ok(ast::ModModule {
        node_index: ast::AtomicNodeIndex::default(),
        range: TextRange::up_to(TextSize::new(to_u32(source.len()))),
        body,
    })
}

/// `source[range]` preceded by a comment line as long as `source[..range.start]`,
/// so that the parser's offsets are those of `source`. `range.start` is the
/// start of a line.
fn padded(source: &str, range: Range<usize>) -> String {
    let mut text = String::with_capacity(range.end);
    match range.start {
        0 => {}
        1 => text.push('\n'),
        start => {
            text.push('#');
            text.push_str(&" ".repeat(start - 2));
            text.push('\n');
        }
    }
    text.push_str(source.get(range).unwrap_or_default());
    text
}

/// The offset of the first line at or after `start` that is neither blank
/// nor a comment (or `start`).
fn first_code(bytes: &[u8], start: usize) -> usize {
    let mut line = start;
    while line < bytes.len() {
        let text = bytes
            .get(line..)
            .and_then(|rest| {
                rest.iter()
                    .position(|&b| !matches!(b, b' ' | b'\t' | b'\x0c'))
            })
            .map_or(line, |skip| line + skip);
        if !matches!(bytes.get(text), Some(b'#' | b'\n' | b'\r')) {
            return line;
        }
        match bytes[text..].iter().position(|&b| b == b'\n') {
            Some(newline) => line = text + newline + 1,
            None => break,
        }
    }
    start
}

/// An upper bound of the recursion depth of parsing `source` and walking its
/// tree, in units of [`STACK_PER_UNIT`] (see the [module docs](self)).
fn units(source: &str, mode: Mode) -> usize {
    let bytes = byte_units(source.as_bytes());
    if bytes <= MAX_UNITS {
        return bytes;
    }
    units_of_tokens(source, mode).map_or(bytes, |tokens| tokens.min(bytes))
}

/// The bound counted on bytes alone, true of any tokenization: a token that
/// can nest holds an operator or bracket byte, or is a keyword, at most three
/// of which (a number, a keyword, another number) a run of identifier
/// characters holds; an indented line holds a line break.
fn byte_units(bytes: &[u8]) -> usize {
    let mut units = 1_usize;
    let mut in_word = false;
    for &byte in bytes {
        match BYTE_KIND[usize::from(byte)] {
            WORD => {
                if !in_word {
                    units += 3;
                }
                in_word = true;
            }
            SPACE => in_word = false,
            _ => {
                units += 1;
                in_word = false;
            }
        }
    }
    units
}

const WORD: u8 = 0;
const SPACE: u8 = 1;
const OTHER: u8 = 2;

/// Per byte: ASCII identifier characters, blanks, and everything else
/// (operators, quotes, line breaks, and each byte of non-ASCII text).
const BYTE_KIND: [u8; 256] = {
    let mut table = [OTHER; 256];
    let mut byte = 0;
    while byte < 128 {
        if (byte as u8).is_ascii_alphanumeric() || byte == b'_' as usize {
            table[byte] = WORD;
        }
        byte += 1;
    }
    table[b' ' as usize] = SPACE;
    table[b'\t' as usize] = SPACE;
    table[0x0c] = SPACE;
    table
};

/// The bound counted on Ruff's tokens: the tokens that can nest, plus the
/// line breaks (each may become an indented line when the parser recovers
/// from an unclosed bracket). `None` when the parser could re-lex strings
/// differently: a lexical error, or a string inside an f-string's
/// replacement field.
fn units_of_tokens(source: &str, mode: Mode) -> Option<usize> {
    let mut lexer = lexer::lex(source, mode);
    let mut units = 1_usize;
    let mut open_interpolated = 0_usize;
    loop {
        match lexer.next_token() {
            TokenKind::EndOfFile => break,
            TokenKind::Unknown => return None,
            TokenKind::String if open_interpolated > 0 => return None,
            TokenKind::FStringStart | TokenKind::TStringStart => {
                if open_interpolated > 0 {
                    return None;
                }
                open_interpolated += 1;
                units += 1;
            }
            TokenKind::FStringEnd | TokenKind::TStringEnd => {
                open_interpolated = open_interpolated.saturating_sub(1);
                units += 1;
            }
            TokenKind::Name
            | TokenKind::Int
            | TokenKind::Float
            | TokenKind::Complex
            | TokenKind::String
            | TokenKind::FStringMiddle
            | TokenKind::TStringMiddle
            | TokenKind::Comma
            | TokenKind::Colon
            | TokenKind::Equal
            | TokenKind::Semi
            | TokenKind::Newline
            | TokenKind::NonLogicalNewline
            | TokenKind::Comment
            | TokenKind::Dedent => {}
            _ => units += 1,
        }
    }
    if !lexer.finish().is_empty() {
        return None;
    }
    let line_breaks = source.bytes().filter(|&b| b == b'\n' || b == b'\r').count();
    Some(units.saturating_add(line_breaks))
}

/// Byte offsets where top-level statements start, after the first: lines
/// at column 0, outside brackets and strings, that do not continue the
/// statement before (`else`, `elif`, `except`, `finally`, or what follows a
/// decorator). Splitting there parses valid code exactly as a whole; a wrong
/// guess on odd code costs a syntax error, never the stack.
fn statement_starts(source: &str) -> Vec<usize> {
    let bytes = source.as_bytes();
    let mut starts = Vec::new();
    let mut depth = 0_i32;
    let mut after_decorator = false;
    let mut at_line_start = true;
    let mut index = 0;
    while index < bytes.len() {
        if at_line_start {
            at_line_start = false;
            if depth == 0 {
                let first = bytes[index];
                if !matches!(first, b' ' | b'\t' | b'\x0c' | b'#' | b'\n' | b'\r') {
                    let continues = after_decorator
                        || [&b"else"[..], b"elif", b"except", b"finally"]
                            .iter()
                            .any(|word| starts_with_word(&bytes[index..], word));
                    if !continues && index > 0 {
                        starts.push(index);
                    }
                    after_decorator = first == b'@';
                }
            }
        }
        while let Some(&b) = bytes.get(index) {
            let delta = BYTE_CLASS[usize::from(b)];
            if delta == SPECIAL {
                break;
            }
            depth = (depth + i32::from(delta)).max(0);
            index += 1;
        }
        match bytes.get(index) {
            None => break,
            Some(b'#') => {
                while bytes.get(index).is_some_and(|&b| b != b'\n' && b != b'\r') {
                    index += 1;
                }
                continue;
            }
            Some(&quote @ (b'\'' | b'"')) => index = skip_string(bytes, index, quote),
            Some(&newline) => {
                let before =
                    if newline == b'\n' && index > 0 && bytes.get(index - 1) == Some(&b'\r') {
                        index.checked_sub(2)
                    } else {
                        index.checked_sub(1)
                    };
                let continued = before.and_then(|i| bytes.get(i)) == Some(&b'\\');
                // `\r\n` is one line break: look at the next line after `\n`.
                let crlf = newline == b'\r' && bytes.get(index + 1) == Some(&b'\n');
                at_line_start = !(continued || crlf);
            }
        }
        index += 1;
    }
    starts
}

/// Whether `text` starts with the keyword `word` (not a longer name).
fn starts_with_word(text: &[u8], word: &[u8]) -> bool {
    text.starts_with(word)
        && text
            .get(word.len())
            .is_none_or(|&b| !(b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80))
}

/// Bracket nesting CPython's tokenizer accepts (`MAXLEVEL`).
const MAX_BRACKET_DEPTH: i32 = 200;

/// Levels of indented blocks CPython's tokenizer accepts (`MAXINDENT` - 1).
const MAX_BLOCK_DEPTH: u32 = 99;

/// The first place where brackets or indented blocks nest deeper than
/// CPython accepts, as (byte offset, kind, limit). Brackets in comments and
/// string literals are ignored; brackets inside f-string replacement fields
/// are not counted, which can only under-count.
fn excessive_nesting(source: &str) -> Option<(usize, NestingKind, u32)> {
    let bytes = source.as_bytes();
    let mut depth = 0_i32;
    // Indentation widths of the open blocks, outermost (0) first.
    let mut indents: Vec<usize> = vec![0];
    let mut at_line_start = true;
    let mut index = 0;
    while index < bytes.len() {
        if at_line_start {
            at_line_start = false;
            if depth == 0 {
                let mut width = 0;
                while let Some(&b) = bytes.get(index) {
                    match b {
                        b' ' => width += 1,
                        b'\t' => width = (width / 8 + 1) * 8,
                        b'\x0c' => width = 0,
                        _ => break,
                    }
                    index += 1;
                }
                // Blank and comment-only lines do not open or close blocks.
                if !matches!(bytes.get(index), None | Some(b'\n' | b'\r' | b'#')) {
                    while indents.last().is_some_and(|&top| top > width) {
                        indents.pop();
                    }
                    if indents.last().is_some_and(|&top| top < width) {
                        indents.push(width);
                        if indents.len() > MAX_BLOCK_DEPTH as usize + 1 {
                            return Some((index, NestingKind::Blocks, MAX_BLOCK_DEPTH));
                        }
                    }
                }
                continue;
            }
        }
        // Brackets are counted without branching; the loop stops only at
        // quotes, comments and line ends.
        while let Some(&b) = bytes.get(index) {
            let delta = BYTE_CLASS[usize::from(b)];
            if delta == SPECIAL {
                break;
            }
            depth = (depth + i32::from(delta)).max(0);
            if depth > MAX_BRACKET_DEPTH {
                return Some((
                    index,
                    NestingKind::Brackets,
                    MAX_BRACKET_DEPTH.unsigned_abs(),
                ));
            }
            index += 1;
        }
        match bytes.get(index) {
            None => break,
            Some(b'#') => {
                while bytes.get(index).is_some_and(|&b| b != b'\n' && b != b'\r') {
                    index += 1;
                }
                continue;
            }
            Some(&quote @ (b'\'' | b'"')) => index = skip_string(bytes, index, quote),
            Some(&newline) => {
                // A backslash continuation keeps the logical line going.
                let before =
                    if newline == b'\n' && index > 0 && bytes.get(index - 1) == Some(&b'\r') {
                        index.checked_sub(2)
                    } else {
                        index.checked_sub(1)
                    };
                at_line_start = before.and_then(|i| bytes.get(i)) != Some(&b'\\');
            }
        }
        index += 1;
    }
    None
}

/// Marks bytes where [`excessive_nesting`] must stop and look.
const SPECIAL: i8 = i8::MAX;

/// Per byte: +1 for an opening bracket, -1 for a closing one, [`SPECIAL`]
/// for quotes, `#` and line ends, 0 otherwise.
const BYTE_CLASS: [i8; 256] = {
    let mut table = [0; 256];
    table[b'(' as usize] = 1;
    table[b'[' as usize] = 1;
    table[b'{' as usize] = 1;
    table[b')' as usize] = -1;
    table[b']' as usize] = -1;
    table[b'}' as usize] = -1;
    table[b'\'' as usize] = SPECIAL;
    table[b'"' as usize] = SPECIAL;
    table[b'#' as usize] = SPECIAL;
    table[b'\n' as usize] = SPECIAL;
    table[b'\r' as usize] = SPECIAL;
    table
};

/// Given the opening quote at `start`, the index of the closing quote (or of
/// the end of the line/input for an unterminated literal).
fn skip_string(bytes: &[u8], start: usize, quote: u8) -> usize {
    let triple = bytes.get(start + 1) == Some(&quote) && bytes.get(start + 2) == Some(&quote);
    let mut index = if triple { start + 3 } else { start + 1 };
    while let Some(&byte) = bytes.get(index) {
        if byte == b'\\' {
            index += 2;
            continue;
        }
        if byte == quote {
            if !triple {
                return index;
            }
            if bytes.get(index + 1) == Some(&quote) && bytes.get(index + 2) == Some(&quote) {
                return index + 2;
            }
        } else if byte == b'\n' && !triple {
            return index;
        }
        index += 1;
    }
    bytes.len()
}

/// 1-based line and character column of a byte offset.
pub(crate) fn line_and_column(source: &str, offset: usize) -> (u32, u32) {
    let offset = offset.min(source.len());
    let mut lines = LineCursor::new(source);
    let line = lines.line_of(offset);
    let column = source
        .get(lines.line_start..offset)
        .map_or(1, |text| text.chars().count() + 1);
    (line, to_u32(column))
}

pub(crate) fn to_u32(value: usize) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

/// Turns byte offsets into 1-based line numbers by scanning forward from the
/// previous query; the analysis asks in (mostly) increasing order, so each
/// byte is scanned about once and only as far as the last query.
#[derive(Debug)]
pub(crate) struct LineCursor<'a> {
    source: &'a [u8],
    offset: usize,
    line: u32,
    /// Byte offset where the line containing `offset` starts.
    line_start: usize,
}

impl<'a> LineCursor<'a> {
    pub(crate) fn new(source: &'a str) -> Self {
        Self {
            source: source.as_bytes(),
            offset: 0,
            line: 1,
            line_start: 0,
        }
    }

    pub(crate) fn line_of(&mut self, offset: usize) -> u32 {
        let offset = offset.min(self.source.len());
        if offset < self.offset {
            *self = Self {
                source: self.source,
                offset: 0,
                line: 1,
                line_start: 0,
            };
        }
        let skipped = self.source.get(self.offset..offset).unwrap_or_default();
        // Python ends lines at `\n`, `\r\n` and a lone `\r`; count `\n` in
        // bulk and look at `\r` only when there is one.
        let mut newlines = skipped.iter().filter(|&&b| b == b'\n').count();
        if skipped.contains(&b'\r') {
            newlines += skipped
                .iter()
                .enumerate()
                .filter(|&(i, &b)| {
                    b == b'\r' && self.source.get(self.offset + i + 1) != Some(&b'\n')
                })
                .count();
        }
        if let Some(last) = skipped.iter().rposition(|&b| b == b'\n' || b == b'\r') {
            self.line_start = self.offset + last + 1;
        }
        self.line = self.line.saturating_add(to_u32(newlines));
        self.offset = offset;
        self.line
    }
}
// -- What CPython's compiler refuses in a tree that parses ------------------

/// The Python whose compiler [`check_compiles`] follows. Its version
/// matters for few checks, which agree from 3.11 to 3.13 (3.10 also refuses
/// an asynchronous comprehension inside a synchronous one, 3.14 a walrus or
/// `yield` in an annotation): code that only some versions refuse is
/// accepted.
const COMPILED_AS: PythonVersion = PythonVersion::PY311;

/// Why code that parses would not compile, where break, continue or
/// return would leave an `except*` block.
const EXCEPT_STAR_EXIT: &str = "'break', 'continue' and 'return' cannot appear in an except* block";

/// Refuses what CPython's compiler refuses in a tree that parses, as the
/// kernel compiles a cell (`exec` mode, no top-level `await`): `return`,
/// `yield` or `await` outside a function (or `await` outside an `async`
/// one), `break` and `continue` outside a loop or leaving an `except*`
/// block, a duplicate parameter, an unknown or late `from __future__`
/// import, `nonlocal` at module level or without a binding, a name used or
/// bound before its `global` or `nonlocal` declaration, a parameter
/// declared `global` or `nonlocal`, assignment to `__debug__`, `import *`
/// in a function or class, misplaced starred expressions, unreachable or
/// conflicting `match` patterns, a walrus rebinding a comprehension
/// variable or in a comprehension of a class body. The checks are Ruff's
/// semantic syntax checks ([`SemanticSyntaxChecker`]) and a few more, on
/// the scopes tracked here. Names crafted to collide cannot slow it: its
/// sets are seeded like the analysis'.
///
/// # Errors
///
/// [`AnalysisError::Syntax`] at the first offending place, with Ruff's or
/// CPython's message.
pub(crate) fn check_compiles<'a>(
    source: &'a str,
    module: &'a ast::ModModule,
) -> Result<(), AnalysisError> {
    let mut walker = Compile {
        checker: SemanticSyntaxChecker::new(),
        cx: CompileContext {
            source,
            scopes: vec![Scope::new(ScopeKind::Module, declared(&module.body, None))],
            errors: RefCell::new(Vec::new()),
            iterables: Cell::new(0),
            future_annotations: imports_future_annotations(&module.body),
        },
    };
    walker.visit_body(&module.body);
    let first = walker
        .cx
        .errors
        .into_inner()
        .into_iter()
        .min_by_key(|(range, _)| range.start());
    match first {
        None => Ok(()),
        Some((range, message)) => {
            let (line, column) = line_and_column(source, usize::from(range.start()));
            Err(AnalysisError::Syntax {
                line,
                column,
                message,
            })
        }
    }
}

/// Whether `body` starts (after its docstring and other `__future__`
/// imports) with `from __future__ import annotations`.
fn imports_future_annotations(body: &[Stmt]) -> bool {
    let mut statements = body.iter().peekable();
    if let Some(Stmt::Expr(first)) = statements.peek()
        && first.value.is_string_literal_expr()
    {
        statements.next();
    }
    for statement in statements {
        match statement {
            Stmt::ImportFrom(import) if import.module.as_deref() == Some("__future__") => {
                if import
                    .names
                    .iter()
                    .any(|a| a.name.as_str() == "annotations")
                {
                    return true;
                }
            }
            _ => return false,
        }
    }
    false
}

type NameSet<'a> = HashSet<&'a str, foldhash::fast::RandomState>;
type NameRanges<'a> = HashMap<&'a str, TextRange, foldhash::fast::RandomState>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ScopeKind {
    Module,
    Function {
        is_async: bool,
    },
    Lambda,
    Class,
    /// A list, set or dict comprehension, or (`generator`) a generator
    /// expression.
    Comprehension {
        is_async: bool,
        generator: bool,
    },
}

/// What a scope declares, found before it is walked (Python's scopes are
/// decided for the whole block).
#[derive(Debug, Default)]
struct Declared<'a> {
    /// Names declared `global`, with the first declaration.
    globals: NameRanges<'a>,
    /// Names declared `nonlocal`, with the first declaration.
    nonlocals: NameRanges<'a>,
    /// Names the scope may bind: every target, import, definition, handler
    /// and pattern name, comprehension targets included (more names than
    /// Python binds only make `nonlocal` accept more).
    bound: NameSet<'a>,
    /// The parameters of a function or lambda.
    parameters: NameSet<'a>,
}

/// What `body` (of a function with `parameters`, or a module or class)
/// declares, without looking into nested functions and classes.
fn declared<'a>(body: &'a [Stmt], parameters: Option<&'a ast::Parameters>) -> Declared<'a> {
    let mut declared = Declared::default();
    if let Some(parameters) = parameters {
        for parameter in parameters {
            declared.parameters.insert(parameter.name().as_str());
        }
    }
    declared.visit_body(body);
    declared
}

impl<'a> Visitor<'a> for Declared<'a> {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        match stmt {
            Stmt::FunctionDef(def) => {
                self.bound.insert(def.name.as_str());
                for decorator in &def.decorator_list {
                    self.visit_decorator(decorator);
                }
                self.visit_parameters(&def.parameters);
                if let Some(returns) = &def.returns {
                    self.visit_annotation(returns);
                }
            }
            Stmt::ClassDef(class) => {
                self.bound.insert(class.name.as_str());
                for decorator in &class.decorator_list {
                    self.visit_decorator(decorator);
                }
                if let Some(arguments) = &class.arguments {
                    self.visit_arguments(arguments);
                }
            }
            Stmt::Global(ast::StmtGlobal { names, range, .. }) => {
                for name in names {
                    self.globals.entry(name.as_str()).or_insert(*range);
                }
            }
            Stmt::Nonlocal(ast::StmtNonlocal { names, range, .. }) => {
                for name in names {
                    self.nonlocals.entry(name.as_str()).or_insert(*range);
                    self.bound.insert(name.as_str());
                }
            }
            Stmt::Import(ast::StmtImport { names, .. }) => {
                for alias in names {
                    let bound = match &alias.asname {
                        Some(asname) => asname.as_str(),
                        None => alias.name.as_str().split('.').next().unwrap_or_default(),
                    };
                    self.bound.insert(bound);
                }
            }
            Stmt::ImportFrom(ast::StmtImportFrom { names, .. }) => {
                for alias in names {
                    self.bound
                        .insert(alias.asname.as_ref().unwrap_or(&alias.name).as_str());
                }
            }
            _ => visitor::walk_stmt(self, stmt),
        }
    }

    fn visit_expr(&mut self, expr: &'a Expr) {
        match expr {
            Expr::Name(ast::ExprName {
                id,
                ctx: ExprContext::Store | ExprContext::Del,
                ..
            }) => {
                self.bound.insert(id.as_str());
            }
            // The body is the lambda's own scope.
            Expr::Lambda(lambda) => {
                if let Some(parameters) = &lambda.parameters {
                    self.visit_parameters(parameters);
                }
            }
            _ => visitor::walk_expr(self, expr),
        }
    }

    fn visit_except_handler(&mut self, handler: &'a ast::ExceptHandler) {
        let ast::ExceptHandler::ExceptHandler(inner) = handler;
        if let Some(name) = &inner.name {
            self.bound.insert(name.as_str());
        }
        visitor::walk_except_handler(self, handler);
    }

    fn visit_pattern(&mut self, pattern: &'a ast::Pattern) {
        let name = match pattern {
            ast::Pattern::MatchAs(ast::PatternMatchAs { name, .. })
            | ast::Pattern::MatchStar(ast::PatternMatchStar { name, .. }) => name.as_ref(),
            ast::Pattern::MatchMapping(ast::PatternMatchMapping { rest, .. }) => rest.as_ref(),
            _ => None,
        };
        if let Some(name) = name {
            self.bound.insert(name.as_str());
        }
        visitor::walk_pattern(self, pattern);
    }
}

/// A scope being walked.
#[derive(Debug)]
struct Scope<'a> {
    kind: ScopeKind,
    declared: Declared<'a>,
    /// In the body of a loop of this scope.
    in_loop: bool,
    /// In an `except*` block inside the innermost loop (or outside any).
    loop_exit_blocked: bool,
    /// In an `except*` block of this scope.
    return_blocked: bool,
}

impl<'a> Scope<'a> {
    fn new(kind: ScopeKind, declared: Declared<'a>) -> Self {
        Self {
            kind,
            declared,
            in_loop: false,
            loop_exit_blocked: false,
            return_blocked: false,
        }
    }
}

/// The scopes of the walk and the errors found, for Ruff's checker.
#[derive(Debug)]
struct CompileContext<'a> {
    source: &'a str,
    /// The module first; never empty.
    scopes: Vec<Scope<'a>>,
    errors: RefCell<Vec<(TextRange, String)>>,
    /// How many iterables of comprehensions the walk is in (a walrus is
    /// refused anywhere inside one, nested functions included).
    iterables: Cell<u32>,
    /// The module imports `annotations` from `__future__`: annotations are
    /// kept as text, never compiled.
    future_annotations: bool,
}

impl<'a> CompileContext<'a> {
    fn kind(&self) -> ScopeKind {
        self.scopes.last().map_or(ScopeKind::Module, |s| s.kind)
    }

    /// Whether an annotated assignment's annotation is compiled here: not
    /// in a function (where it is never evaluated), nor under `from
    /// __future__ import annotations` (where it is kept as text).
    fn annotations_compiled(&self) -> bool {
        !self.future_annotations
            && !self
                .scopes
                .iter()
                .any(|s| matches!(s.kind, ScopeKind::Function { .. }))
    }

    fn declared(&self) -> Option<&Declared<'a>> {
        self.scopes.last().map(|s| &s.declared)
    }

    fn report(&self, range: TextRange, message: impl Into<String>) {
        self.errors.borrow_mut().push((range, message.into()));
    }

    /// The checks Ruff's checker does not make.
    fn check_stmt(&self, stmt: &'a Stmt) {
        let Some(scope) = self.scopes.last() else {
            return;
        };
        match stmt {
            Stmt::Break(ast::StmtBreak { range, .. })
            | Stmt::Continue(ast::StmtContinue { range, .. })
                if scope.in_loop && scope.loop_exit_blocked =>
            {
                self.report(*range, EXCEPT_STAR_EXIT);
            }
            Stmt::Return(ast::StmtReturn { range, .. }) if scope.return_blocked => {
                self.report(*range, EXCEPT_STAR_EXIT);
            }
            Stmt::Nonlocal(ast::StmtNonlocal { names, .. }) => {
                for name in names {
                    if scope.declared.globals.contains_key(name.as_str()) {
                        self.report(name.range, format!("name '{name}' is nonlocal and global"));
                    } else if scope.declared.parameters.contains(name.as_str()) {
                        self.report(
                            name.range,
                            format!("name '{name}' is parameter and nonlocal"),
                        );
                    }
                }
            }
            // (A parenthesised target, `(x): int`, is no annotated name.)
            Stmt::AnnAssign(ast::StmtAnnAssign { target, simple, .. }) if *simple => {
                if let Expr::Name(ast::ExprName { id, range, .. }) = target.as_ref() {
                    if scope.declared.nonlocals.contains_key(id.as_str()) {
                        self.report(*range, format!("annotated name '{id}' can't be nonlocal"));
                    } else if !self.annotations_compiled()
                        && self.kind() != ScopeKind::Module
                        && scope.declared.globals.contains_key(id.as_str())
                    {
                        // (Ruff's checker, which says so otherwise, does not
                        // see this statement: see `visit_stmt`.)
                        self.report(*range, format!("annotated name '{id}' can't be global"));
                    }
                }
            }
            _ => {}
        }
    }

    /// The checks Ruff's checker does not make.
    fn check_expr(&self, expr: &'a Expr) {
        match expr {
            // Not `del x.__debug__` nor `x.__debug__ += 1` (see `visit_stmt`):
            // CPython compiles those.
            Expr::Attribute(ast::ExprAttribute {
                attr,
                ctx: ExprContext::Store,
                ..
            }) if attr.as_str() == "__debug__" => {
                self.report(attr.range, "cannot assign to __debug__");
            }
            Expr::Named(ast::ExprNamed { range, .. }) => {
                if self.iterables.get() > 0 {
                    self.report(
                        *range,
                        "assignment expression cannot be used in a comprehension iterable expression",
                    );
                }
                let outer = self
                    .scopes
                    .iter()
                    .rev()
                    .find(|s| !matches!(s.kind, ScopeKind::Comprehension { .. }));
                if matches!(self.kind(), ScopeKind::Comprehension { .. })
                    && outer.is_some_and(|s| s.kind == ScopeKind::Class)
                {
                    self.report(
                        *range,
                        "assignment expression within a comprehension cannot be used in a class body",
                    );
                }
            }
            Expr::Name(ast::ExprName { id, ctx, range, .. }) => {
                let declaration = self
                    .declared()
                    .and_then(|d| d.nonlocals.get(id.as_str()))
                    .copied();
                if let Some(declaration) = declaration
                    && range.start() < declaration.start()
                {
                    let message = match ctx {
                        ExprContext::Load => {
                            format!("name '{id}' is used prior to nonlocal declaration")
                        }
                        _ => format!("name '{id}' is assigned to before nonlocal declaration"),
                    };
                    self.report(*range, message);
                }
            }
            _ => {}
        }
    }
}

impl SemanticSyntaxContext for CompileContext<'_> {
    fn future_annotations_or_stub(&self) -> bool {
        // Only adds checks of annotations that CPython before 3.14 skips.
        false
    }

    fn lazy_import_context(&self) -> Option<LazyImportContext> {
        None
    }

    fn python_version(&self) -> PythonVersion {
        COMPILED_AS
    }

    fn source(&self) -> &str {
        self.source
    }

    fn global(&self, name: &str) -> Option<TextRange> {
        self.declared().and_then(|d| d.globals.get(name)).copied()
    }

    fn has_nonlocal_binding(&self, name: &str) -> bool {
        // As CPython's symbol table: the names bound by the enclosing
        // functions, outermost first, less those an inner one declares global.
        let enclosing = self.scopes.len().saturating_sub(1);
        let mut bound = false;
        for scope in self.scopes.iter().take(enclosing) {
            // A class body gives its methods the cell `__class__` (and
            // from 3.12 `__classdict__`), which they may declare nonlocal.
            if scope.kind == ScopeKind::Class && matches!(name, "__class__" | "__classdict__") {
                bound = true;
            } else if matches!(scope.kind, ScopeKind::Function { .. } | ScopeKind::Lambda) {
                if scope.declared.globals.contains_key(name) {
                    bound = false;
                } else if scope.declared.bound.contains(name)
                    || scope.declared.parameters.contains(name)
                {
                    bound = true;
                }
            }
        }
        bound
    }

    fn in_async_context(&self) -> bool {
        for scope in self.scopes.iter().rev() {
            match scope.kind {
                ScopeKind::Function { is_async } => return is_async,
                ScopeKind::Comprehension { .. } => {}
                ScopeKind::Lambda | ScopeKind::Class | ScopeKind::Module => return false,
            }
        }
        false
    }

    fn in_await_allowed_context(&self) -> bool {
        for scope in self.scopes.iter().rev() {
            match scope.kind {
                ScopeKind::Function { .. }
                | ScopeKind::Lambda
                | ScopeKind::Comprehension {
                    generator: true, ..
                } => return true,
                ScopeKind::Comprehension { .. } => {}
                ScopeKind::Class | ScopeKind::Module => return false,
            }
        }
        false
    }

    fn in_yield_allowed_context(&self) -> bool {
        matches!(self.kind(), ScopeKind::Function { .. } | ScopeKind::Lambda)
    }

    fn in_sync_comprehension(&self) -> bool {
        self.scopes.iter().any(|s| {
            matches!(
                s.kind,
                ScopeKind::Comprehension {
                    is_async: false,
                    ..
                }
            )
        })
    }

    fn in_module_scope(&self) -> bool {
        self.kind() == ScopeKind::Module
    }

    fn in_function_scope(&self) -> bool {
        matches!(self.kind(), ScopeKind::Function { .. })
    }

    fn in_generator_context(&self) -> bool {
        for scope in self.scopes.iter().rev() {
            match scope.kind {
                ScopeKind::Comprehension {
                    generator: true, ..
                } => return true,
                ScopeKind::Comprehension { .. } => {}
                _ => return false,
            }
        }
        false
    }

    fn in_notebook(&self) -> bool {
        // The kernel compiles cells without top-level `await`, IPython
        // syntax or not.
        false
    }

    fn report_semantic_error(&self, error: SemanticSyntaxError) {
        // Ruff's looks into a lambda inside the comprehension, whose
        // walrus binds in the lambda (CPython compiles `[lambda: (a := 0)
        // for a in b]`): `Compile::comprehension` makes this check.
        if matches!(
            error.kind,
            SemanticSyntaxErrorKind::ReboundComprehensionVariable
        ) {
            return;
        }
        self.report(error.range, error.to_string());
    }

    fn in_loop_context(&self) -> bool {
        self.scopes.last().is_some_and(|s| s.in_loop)
    }

    fn is_bound_parameter(&self, name: &str) -> bool {
        matches!(self.kind(), ScopeKind::Function { .. } | ScopeKind::Lambda)
            && self.declared().is_some_and(|d| d.parameters.contains(name))
    }
}

/// The walk of [`check_compiles`]: Ruff's checker sees every statement and
/// expression in its scope.
#[derive(Debug)]
struct Compile<'a> {
    checker: SemanticSyntaxChecker,
    cx: CompileContext<'a>,
}

/// The loop and `except*` state of a scope, to restore.
type Blocks = (bool, bool, bool);

impl<'a> Compile<'a> {
    fn blocks(&self) -> Blocks {
        self.cx.scopes.last().map_or((false, false, false), |s| {
            (s.in_loop, s.loop_exit_blocked, s.return_blocked)
        })
    }

    fn set_blocks(&mut self, (in_loop, loop_exit_blocked, return_blocked): Blocks) {
        if let Some(scope) = self.cx.scopes.last_mut() {
            scope.in_loop = in_loop;
            scope.loop_exit_blocked = loop_exit_blocked;
            scope.return_blocked = return_blocked;
        }
    }

    fn loop_body(&mut self, body: &'a [Stmt]) {
        let saved = self.blocks();
        self.set_blocks((true, false, saved.2));
        self.visit_body(body);
        self.set_blocks(saved);
    }

    fn scoped(&mut self, kind: ScopeKind, declared: Declared<'a>, walk: impl FnOnce(&mut Self)) {
        self.cx.scopes.push(Scope::new(kind, declared));
        walk(self);
        self.cx.scopes.pop();
    }

    fn iterable(&mut self, iter: &'a Expr) {
        let iterables = &self.cx.iterables;
        iterables.set(iterables.get().saturating_add(1));
        self.visit_expr(iter);
        let iterables = &self.cx.iterables;
        iterables.set(iterables.get().saturating_sub(1));
    }

    /// A comprehension: its first iterable in the enclosing scope, the rest
    /// in its own.
    fn comprehension(
        &mut self,
        generators: &'a [ast::Comprehension],
        generator: bool,
        elements: &[&'a Expr],
    ) {
        let Some((first, rest)) = generators.split_first() else {
            for element in elements {
                self.visit_expr(element);
            }
            return;
        };
        // A walrus in an element may not rebind an iteration variable (one
        // in a lambda binds in the lambda).
        let variables: Vec<&str> = generators
            .iter()
            .filter_map(|g| g.target.as_name_expr().map(|n| n.id.as_str()))
            .collect();
        for element in elements {
            let mut rebound = Rebound {
                variables: &variables,
                found: Vec::new(),
            };
            rebound.visit_expr(element);
            for range in rebound.found {
                self.cx.report(
                    range,
                    "assignment expression cannot rebind comprehension variable",
                );
            }
        }
        self.iterable(&first.iter);
        let kind = ScopeKind::Comprehension {
            is_async: generators.iter().any(|g| g.is_async),
            generator,
        };
        self.scoped(kind, Declared::default(), |walk| {
            walk.visit_expr(&first.target);
            for condition in &first.ifs {
                walk.visit_expr(condition);
            }
            for comprehension in rest {
                walk.iterable(&comprehension.iter);
                walk.visit_expr(&comprehension.target);
                for condition in &comprehension.ifs {
                    walk.visit_expr(condition);
                }
            }
            for element in elements {
                walk.visit_expr(element);
            }
        });
    }
}

/// The walruses of a comprehension's element that rebind one of its
/// iteration variables, outside lambdas.
struct Rebound<'v> {
    variables: &'v [&'v str],
    found: Vec<TextRange>,
}

impl<'a> Visitor<'a> for Rebound<'_> {
    fn visit_expr(&mut self, expr: &'a Expr) {
        match expr {
            Expr::Lambda(_) => {}
            Expr::Named(ast::ExprNamed { target, .. }) => {
                if let Expr::Name(ast::ExprName { id, range, .. }) = target.as_ref()
                    && self.variables.contains(&id.as_str())
                {
                    self.found.push(*range);
                }
                visitor::walk_expr(self, expr);
            }
            _ => visitor::walk_expr(self, expr),
        }
    }
}

impl<'a> Visitor<'a> for Compile<'a> {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        // An annotated assignment whose annotation is not compiled, or
        // whose target is parenthesised, is not shown to Ruff's checker,
        // which would check its annotation and call its name global
        // (`check_stmt` makes the checks that still hold).
        let annotation = match stmt {
            Stmt::AnnAssign(ann) => Some((ann, ann.simple && self.cx.annotations_compiled())),
            _ => None,
        };
        if annotation.is_none_or(|(_, checked)| checked) {
            self.checker.visit_stmt(stmt, &self.cx);
        }
        self.cx.check_stmt(stmt);
        if let Some((ann, _)) = annotation {
            self.visit_expr(&ann.target);
            if self.cx.annotations_compiled() {
                self.visit_annotation(&ann.annotation);
            }
            if let Some(value) = &ann.value {
                self.visit_expr(value);
            }
            return;
        }
        match stmt {
            Stmt::FunctionDef(def) => {
                for decorator in &def.decorator_list {
                    self.visit_decorator(decorator);
                }
                if let Some(type_params) = &def.type_params {
                    self.visit_type_params(type_params);
                }
                self.visit_parameters(&def.parameters);
                if let Some(returns) = &def.returns {
                    self.visit_annotation(returns);
                }
                let kind = ScopeKind::Function {
                    is_async: def.is_async,
                };
                let declared = declared(&def.body, Some(&def.parameters));
                self.scoped(kind, declared, |walk| walk.visit_body(&def.body));
            }
            Stmt::ClassDef(class) => {
                for decorator in &class.decorator_list {
                    self.visit_decorator(decorator);
                }
                if let Some(type_params) = &class.type_params {
                    self.visit_type_params(type_params);
                }
                if let Some(arguments) = &class.arguments {
                    self.visit_arguments(arguments);
                }
                let declared = declared(&class.body, None);
                self.scoped(ScopeKind::Class, declared, |walk| {
                    walk.visit_body(&class.body);
                });
            }
            Stmt::For(ast::StmtFor {
                target,
                iter,
                body,
                orelse,
                ..
            }) => {
                self.visit_expr(iter);
                self.visit_expr(target);
                self.loop_body(body);
                self.visit_body(orelse);
            }
            Stmt::While(ast::StmtWhile {
                test, body, orelse, ..
            }) => {
                self.visit_expr(test);
                self.loop_body(body);
                self.visit_body(orelse);
            }
            Stmt::Try(ast::StmtTry {
                body,
                handlers,
                orelse,
                finalbody,
                is_star,
                ..
            }) => {
                self.visit_body(body);
                for handler in handlers {
                    let saved = self.blocks();
                    if *is_star {
                        self.set_blocks((saved.0, true, true));
                    }
                    self.visit_except_handler(handler);
                    self.set_blocks(saved);
                }
                self.visit_body(orelse);
                self.visit_body(finalbody);
            }
            // CPython compiles `x.__debug__ += 1`.
            Stmt::AugAssign(ast::StmtAugAssign {
                target, op, value, ..
            }) if target.is_attribute_expr() => {
                self.visit_expr(value);
                self.visit_operator(op);
                self.checker.visit_expr(target, &self.cx);
                visitor::walk_expr(self, target);
            }
            _ => visitor::walk_stmt(self, stmt),
        }
    }

    fn visit_expr(&mut self, expr: &'a Expr) {
        self.checker.visit_expr(expr, &self.cx);
        self.cx.check_expr(expr);
        match expr {
            Expr::Lambda(lambda) => {
                let mut declared = Declared::default();
                if let Some(parameters) = &lambda.parameters {
                    self.visit_parameters(parameters);
                    for parameter in parameters.as_ref() {
                        declared.parameters.insert(parameter.name().as_str());
                    }
                }
                self.scoped(ScopeKind::Lambda, declared, |walk| {
                    walk.visit_expr(&lambda.body);
                });
            }
            Expr::ListComp(ast::ExprListComp {
                elt, generators, ..
            })
            | Expr::SetComp(ast::ExprSetComp {
                elt, generators, ..
            }) => self.comprehension(generators, false, &[elt]),
            Expr::DictComp(ast::ExprDictComp {
                key,
                value,
                generators,
                ..
            }) => self.comprehension(generators, false, &[key, value]),
            Expr::Generator(ast::ExprGenerator {
                elt, generators, ..
            }) => self.comprehension(generators, true, &[elt]),
            _ => visitor::walk_expr(self, expr),
        }
    }

    fn visit_keyword(&mut self, keyword: &'a ast::Keyword) {
        if let Some(arg) = &keyword.arg
            && arg.as_str() == "__debug__"
        {
            self.cx.report(arg.range, "cannot assign to __debug__");
        }
        visitor::walk_keyword(self, keyword);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use proptest::prelude::*;
    use rustpython_ruff_python_ast::visitor::{self, Visitor};

    use super::*;

    #[test]
    fn line_cursor_handles_all_newline_styles() {
        let source = "a\nb\r\nc\rd";
        let mut lines = LineCursor::new(source);
        assert_eq!(lines.line_of(0), 1);
        assert_eq!(lines.line_of(2), 2);
        assert_eq!(lines.line_of(5), 3);
        assert_eq!(lines.line_of(7), 4);
        assert_eq!(lines.line_start, 7);
        assert_eq!(lines.line_of(3), 2);
        assert_eq!(lines.line_of(100), 4);
    }

    fn nested_ifs(levels: usize) -> String {
        let mut source: String = (0..levels)
            .map(|i| format!("{}if a:\n", " ".repeat(i)))
            .collect();
        source.push_str(&" ".repeat(levels));
        source.push_str("pass\n");
        source
    }

    #[test]
    fn nesting_limits_match_cpython() {
        let parens = |n: usize| format!("x = {}a{}", "(".repeat(n), ")".repeat(n));
        assert_eq!(excessive_nesting(&parens(200)), None);
        assert_eq!(
            excessive_nesting(&parens(201)),
            Some((4 + 200, NestingKind::Brackets, 200))
        );
        assert_eq!(excessive_nesting(&nested_ifs(99)), None);
        let deep = nested_ifs(100);
        let (offset, kind, limit) = excessive_nesting(&deep).unwrap();
        assert_eq!((kind, limit), (NestingKind::Blocks, 99));
        assert_eq!(line_and_column(&deep, offset), (101, 101));
    }

    #[test]
    fn nesting_limit_ignores_strings_comments_and_continuations() {
        let open = "(".repeat(300);
        let quoted = format!(
            "s = '{open}'\nt = \"\\\"{open}\"\nu = \"\"\"{open}\n\"\"\"  # {open}\nv = ('{open}',)"
        );
        assert_eq!(excessive_nesting(&quoted), None);
        // Indentation inside brackets, strings or after `\\` is not a block.
        let mut lines = vec!["x = (1,".to_owned()];
        lines.extend((0..150).map(|i| format!("{}2,", " ".repeat(i + 1))));
        lines.push(")".to_owned());
        lines.push("y = 1 + \\".to_owned());
        lines.push("                 2".to_owned());
        assert_eq!(excessive_nesting(&lines.join("\n")), None);
        assert_eq!(
            excessive_nesting(&nested_ifs(99).replace('\n', "\r\n")),
            None
        );
    }

    #[test]
    fn sources_past_the_parsers_offsets_are_too_large() {
        assert_eq!(size_error(MAX_BYTES), None);
        assert_eq!(
            size_error(MAX_BYTES + 1),
            Some(AnalysisError::TooLarge {
                bytes: MAX_BYTES as u64 + 1,
                limit: MAX_BYTES as u64,
            })
        );
    }

    /// A module with top-level statements that continue (`else`, decorated
    /// definitions) and lines at column 0 inside brackets and strings.
    const MODULE: &str = "import os\n\n# a comment\n@decorator\n\n@other(1,\n2)\ndef f(x):\n    return x\nif a:\n    pass\nelif b:\n    pass\nelse:\n    pass\ntry:\n    pass\nexcept E:\n    pass\nfinally:\n    pass\ns = \"\"\"\nnot a statement\n\"\"\"\nt = (1,\n2)\nu = 1 + \\\n2\r\nv = 'x' # (\r\nw = f'{s!r}'\nclass C:\n    x = 1\n%matplotlib inline\n";

    #[test]
    fn statement_starts_skip_continuations_brackets_and_strings() {
        let starts: Vec<&str> = statement_starts(MODULE)
            .into_iter()
            .map(|start| MODULE[start..].lines().next().unwrap())
            .collect();
        assert_eq!(
            starts,
            [
                "@decorator",
                "if a:",
                "try:",
                "s = \"\"\"",
                "t = (1,",
                "u = 1 + \\",
                "v = 'x' # (",
                "w = f'{s!r}'",
                "class C:",
                "%matplotlib inline"
            ]
        );
    }

    fn whole_of(source: &str) -> Vec<Range<usize>> {
        std::iter::once(0..source.len()).collect()
    }

    #[test]
    fn statements_parsed_apart_give_the_tree_of_the_whole() {
        let options = AnalysisOptions { ipython: true };
        let whole = parse_chunks(MODULE, options, &whole_of(MODULE)).unwrap();
        let mut bounds = statement_starts(MODULE);
        bounds.insert(0, 0);
        bounds.push(MODULE.len());
        let chunks: Vec<Range<usize>> = bounds.windows(2).map(|w| w[0]..w[1]).collect();
        assert_eq!(chunks.len(), 11);
        let apart = parse_chunks(MODULE, options, &chunks).unwrap();
        assert_eq!(format!("{apart:?}"), format!("{whole:?}"));
        // A syntax error is reported where it is in the whole source.
        let broken = format!("{MODULE}x = (\n");
        let mut chunks = chunks;
        chunks.push(MODULE.len()..broken.len());
        let whole = parse_chunks(&broken, options, &whole_of(&broken)).unwrap_err();
        assert_eq!(parse_chunks(&broken, options, &chunks).unwrap_err(), whole);
    }

    #[test]
    fn oversized_sources_are_parsed_in_groups_of_statements() {
        // Three units a line: `+`, `*` and the line break.
        let source = "x = a + b * c\n".repeat(MAX_UNITS / 2);
        assert!(units(&source, Mode::Module) > MAX_UNITS);
        let plan = plan(&source, Mode::Module).unwrap();
        assert!(plan.chunks.len() > 1, "{plan:?}");
        assert!(plan.units <= MAX_UNITS);
        assert_eq!(plan.chunks.first().unwrap().start, 0);
        assert_eq!(plan.chunks.last().unwrap().end, source.len());
        assert!(plan.chunks.windows(2).all(|w| w[0].end == w[1].start));
    }

    #[test]
    fn a_source_too_large_to_parse_in_groups_is_refused_by_size() {
        let source = "x = a + b\n".repeat(MAX_SPLIT_BYTES / 10 + 1);
        assert_eq!(
            plan(&source, Mode::Module).unwrap_err(),
            AnalysisError::TooLarge {
                bytes: source.len() as u64,
                limit: MAX_SPLIT_BYTES as u64,
            }
        );
        // As long, but flat, it is parsed in one piece.
        let flat = format!("x = [{}]\n", "1, ".repeat(MAX_SPLIT_BYTES / 3 + 1));
        assert_eq!(plan(&flat, Mode::Module).unwrap().chunks.len(), 1);
    }

    #[test]
    fn one_statement_over_the_limit_is_too_complex_at_its_line() {
        let sum = vec!["a"; MAX_UNITS + 1].join(" + ");
        let source = format!("import os\n\n# the sum\nx = {sum}\ny = 1\n");
        assert_eq!(
            plan(&source, Mode::Module).unwrap_err(),
            AnalysisError::TooComplex {
                line: 4,
                units: MAX_UNITS as u64 + 2,
                limit: MAX_UNITS as u64,
            }
        );
        // A flat literal of the same length is not complex.
        let list = format!("x = [{}]\n", vec!["1"; MAX_UNITS + 1].join(", "));
        assert!(plan(&list, Mode::Module).unwrap().units <= MAX_UNITS);
    }

    #[test]
    fn strings_inside_replacement_fields_and_lexical_errors_use_the_byte_bound() {
        assert_eq!(
            units_of_tokens("x = f'{a}' + f'{b!r:>{w}}'\n", Mode::Module),
            Some(14)
        );
        assert_eq!(units_of_tokens("x = f'{d[\"k\"]}'\n", Mode::Module), None);
        assert_eq!(units_of_tokens("x = f'{f\"{a}\"}'\n", Mode::Module), None);
        assert_eq!(units_of_tokens("x = 'unterminated\n", Mode::Module), None);
        assert_eq!(units_of_tokens("x = $\n", Mode::Module), None);
        // Names, numbers, strings and separators do not nest.
        assert_eq!(
            units_of_tokens("x = [1, 'a', b, {c: d}]; y = 2\n", Mode::Module),
            Some(1 + 4 + 1)
        );
    }

    /// The deepest nesting of a syntax tree, counting every node that a
    /// walk descends through.
    #[derive(Debug, Default)]
    struct Depth {
        current: usize,
        max: usize,
    }

    impl Depth {
        fn enter(&mut self) {
            self.current += 1;
            self.max = self.max.max(self.current);
        }
    }

    macro_rules! counted {
        ($($visit:ident($node:ty) => $walk:ident;)*) => {
            impl<'a> Visitor<'a> for Depth {
                $(fn $visit(&mut self, node: &'a $node) {
                    self.enter();
                    visitor::$walk(self, node);
                    self.current -= 1;
                })*
            }
        };
    }

    counted! {
        visit_stmt(ast::Stmt) => walk_stmt;
        visit_expr(ast::Expr) => walk_expr;
        visit_pattern(ast::Pattern) => walk_pattern;
        visit_comprehension(ast::Comprehension) => walk_comprehension;
        visit_parameters(ast::Parameters) => walk_parameters;
        visit_parameter(ast::Parameter) => walk_parameter;
        visit_arguments(ast::Arguments) => walk_arguments;
        visit_keyword(ast::Keyword) => walk_keyword;
        visit_except_handler(ast::ExceptHandler) => walk_except_handler;
        visit_match_case(ast::MatchCase) => walk_match_case;
        visit_with_item(ast::WithItem) => walk_with_item;
        visit_elif_else_clause(ast::ElifElseClause) => walk_elif_else_clause;
        visit_decorator(ast::Decorator) => walk_decorator;
        visit_f_string(ast::FString) => walk_f_string;
        visit_interpolated_string_element(ast::InterpolatedStringElement) => walk_interpolated_string_element;
    }

    /// The tree's depth, measured on a thread with a stack far larger than
    /// any source here needs; `None` if the parser panics.
    fn tree_depth(source: &str) -> Option<usize> {
        std::thread::scope(|scope| {
            std::thread::Builder::new()
                .stack_size(1 << 30)
                .spawn_scoped(scope, || {
                    let module = parse_unchecked_source(source, PySourceType::Ipynb).into_syntax();
                    let mut depth = Depth::default();
                    depth.visit_body(&module.body);
                    depth.max
                })
                .unwrap()
                .join()
                .ok()
        })
    }

    /// What the bound counts as not nesting must not make the parser
    /// recurse: long random runs of names, numbers, strings, `,`, `:`, `=`,
    /// `;` and line breaks are parsed and walked within the stack their few
    /// units promise (the test binary would abort otherwise).
    #[test]
    fn tokens_that_do_not_nest_do_not_recurse() {
        const FLAT: &[&str] = &["a", "1", "'s'", ",", ":", "=", ";", "b", "2.5", "\n"];
        let mut seed = 7_u64;
        for round in 0..12 {
            let source = (0..100_000)
                .map(|_| {
                    seed = seed
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1_442_695_040_888_963_407);
                    let piece = FLAT[(seed >> 33) as usize % FLAT.len()];
                    // Half the rounds on one line.
                    if round % 2 == 0 && piece == "\n" {
                        " "
                    } else {
                        piece
                    }
                })
                .collect::<Vec<_>>()
                // Apart, so that `:` and `=` do not make `:=` or `==`, and
                // lines not indented.
                .join(" ")
                .split('\n')
                .map(str::trim_start)
                .collect::<Vec<_>>()
                .join("\n");
            let units = units_of_tokens(&source, Mode::Module).unwrap();
            let lines = source.bytes().filter(|&b| b == b'\n').count();
            assert!(units <= lines + 1, "{units} units for {lines} lines");
            let stack = stack_bytes(CALLER_UNITS);
            std::thread::scope(|scope| {
                std::thread::Builder::new()
                    .stack_size(stack)
                    .spawn_scoped(scope, || {
                        let module = parse_unchecked_source(&source, PySourceType::Python);
                        let mut depth = Depth::default();
                        depth.visit_body(&module.syntax().body);
                        depth.max
                    })
                    .unwrap()
                    .join()
                    .unwrap()
            });
        }
    }

    /// Pieces of Python, valid and not: every kind of token, so that random
    /// sequences exercise the parser's error recovery.
    const PIECES: &[&str] = &[
        "a",
        "1",
        "'s'",
        "f'{",
        "}'",
        "f'x{a}'",
        "t'{a}'",
        "\"\"\"",
        "(",
        ")",
        "[",
        "]",
        "{",
        "}",
        ",",
        ":",
        ";",
        "=",
        ":=",
        ".",
        "+",
        "-",
        "*",
        "**",
        "/",
        "//",
        "%",
        "@",
        "|",
        "&",
        "^",
        "~",
        "<<",
        ">",
        "==",
        "->",
        "not",
        "and",
        "or",
        "in",
        "is",
        "if",
        "else",
        "elif",
        "lambda",
        "yield",
        "await",
        "async",
        "for",
        "while",
        "def",
        "class",
        "return",
        "import",
        "from",
        "as",
        "with",
        "try",
        "except",
        "finally",
        "match",
        "case",
        "type",
        "global",
        "del",
        "pass",
        "\n",
        "\n    ",
        "\n        ",
        "\\\n",
        "#c\n",
        "%m",
        "!",
        "?",
        "$",
    ];

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// However the parser recovers, the tree is never deeper than four
        /// levels per unit of the bound (a lambda default is three: the
        /// parameters, the parameter and its default).
        #[test]
        fn the_bound_holds_for_any_tokens(
            head in proptest::collection::vec(0..PIECES.len(), 0..200),
            pattern in proptest::collection::vec(0..PIECES.len(), 1..8),
            repeat in 1_usize..3000,
            tail in proptest::collection::vec(0..PIECES.len(), 0..200),
        ) {
            // A short pattern repeated is what nests deeply (`not not ...`).
            let text = |pieces: &[usize]| {
                pieces.iter().map(|&i| PIECES[i]).collect::<Vec<_>>().join(" ")
            };
            let source = format!(
                "{} {} {}",
                text(&head),
                format!("{} ", text(&pattern)).repeat(repeat),
                text(&tail)
            );
            // The parser panics on some invalid IPython (`lambda\n;`);
            // `with_module` turns that into an error.
            let Some(depth) = tree_depth(&source) else {
                return Ok(());
            };
            let bytes = byte_units(source.as_bytes());
            prop_assert!(depth <= 4 * bytes, "depth {depth}, byte bound {bytes}: {source:?}");
            if let Some(tokens) = units_of_tokens(&source, Mode::Ipython) {
                prop_assert!(depth <= 4 * tokens, "depth {depth}, token bound {tokens}: {source:?}");
            }
        }
    }
}
