//! The running script's `redis.call`, reached from the one Rust callback each VM registers
//! when it starts (`Vm::new`, `slot.f`). A call's state borrows the command that runs the
//! script (its `Exec`, with the shard locks), so the callback cannot own it: mlua's safe way is
//! a callback made per run in a `Lua::scope`, which a small `EVALSHA` paid ~4,400 of its
//! ~27,000 instructions for (making the callback, then invalidating it when the scope ends;
//! docs/benchmarks.md, "EVALSHA"). Here the run lends its `redis.call` to this thread for the
//! length of the script (`lend`), and the registered callback calls it (`call`).
//!
//! The workspace's third module allowed `unsafe` (beside `db::strbuf`, `db::node` and
//! `script::stack`, and one function of `repl::wire`; the workspace denies it): a borrowed closure's lifetime is erased while it
//! is lent. The blocks below say why that is sound.
#![allow(unsafe_code)]

use std::cell::Cell;
use std::ptr::NonNull;

use crate::frame::Frame;
use crate::script::stack::CommandArgs;

/// A script's `redis.call`: the arguments as the script passed them (`stack::CommandArgs`),
/// the reply.
pub type Command<'a> = dyn FnMut(CommandArgs) -> Frame + 'a;

thread_local! {
    /// The command lent by the run on this thread, if any, its lifetime erased.
    static LENT: Cell<Option<NonNull<Command<'static>>>> = const { Cell::new(None) };
}

/// Runs `script` with `command` as this thread's running `redis.call`, then takes it back
/// (also if `script` panics), restoring whatever was lent before.
pub fn lend<R>(command: &mut Command<'_>, script: impl FnOnce() -> R) -> R {
    // SAFETY: only the lifetime changes (same fat pointer). The erased pointer is used by
    // `call` only while it is in `LENT`, and `Restore` puts the previous value back before
    // this function returns or unwinds, so before the borrow of `command` ends.
    let erased = unsafe { std::mem::transmute::<NonNull<Command<'_>>, NonNull<Command<'static>>>(NonNull::from(command)) };
    let _restore = Restore(LENT.replace(Some(erased)));
    script()
}

/// Calls the lent `redis.call`; `None` if nothing is lent (no script runs on this thread) or
/// it is already being called (a call from inside a call, which no command makes).
pub fn call(argv: CommandArgs) -> Option<Frame> {
    let command = LENT.take()?;
    let _restore = Restore(Some(command));
    // SAFETY: `command` was in `LENT`, so `lend` is still running on this thread and its
    // borrow of the closure is live (see `lend`). `take` left `LENT` empty until `_restore`
    // drops, so no other `&mut` to the closure exists while this one does. The closure takes
    // and returns owned values, so nothing it borrows can escape this call.
    Some(unsafe { (*command.as_ptr())(argv) })
}

/// Puts a value back in `LENT` when dropped.
struct Restore(Option<NonNull<Command<'static>>>);

impl Drop for Restore {
    fn drop(&mut self) {
        LENT.set(self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none() -> CommandArgs {
        CommandArgs(Ok(Vec::new()))
    }

    #[test]
    fn a_command_is_callable_only_while_lent_and_not_from_inside_itself() {
        assert!(call(none()).is_none(), "nothing lent");
        let mut calls = 0;
        let mut command = |_: CommandArgs| {
            calls += 1;
            // From inside the command, nothing is lent.
            assert!(call(none()).is_none());
            Frame::Integer(calls)
        };
        let replies = lend(&mut command, || (call(none()), call(none())));
        assert_eq!(replies, (Some(Frame::Integer(1)), Some(Frame::Integer(2))));
        assert!(call(none()).is_none(), "taken back");
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| lend(&mut |_| Frame::Null, || panic!("script panicked"))));
        assert!(unwound.is_err());
        assert!(call(none()).is_none(), "taken back on unwind too");
    }
}
