//! Faults a test injects into the calls that must survive them: a
//! settlement's or a hybrid sync's call that Redis never gets (a stall),
//! or one Redis runs but whose answer is lost (a timeout after the fact).
//! The calls still go to a real `redis-server`; only their fate is told.

use std::collections::VecDeque;
use std::sync::Mutex;

use redis::Cmd;

use super::link::Link;
use super::script::Answer;
use crate::store::admission::StoreError;

/// What becomes of the next call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Redis never gets it.
    Stall,
    /// Redis runs it, and its answer is lost.
    LoseAnswer,
}

/// The faults the next calls meet, in order (none: they go as they would).
#[derive(Debug, Default)]
pub struct Faults(Mutex<VecDeque<Fault>>);

impl Faults {
    /// The next call meets `fault`.
    pub fn push(&self, fault: Fault) {
        self.0.lock().expect("not poisoned").push_back(fault);
    }

    /// No fault for the next calls.
    pub fn clear(&self) {
        self.0.lock().expect("not poisoned").clear();
    }

    /// Runs `command` on `link` as the next fault says.
    pub async fn run(&self, link: &Link, command: Cmd) -> Result<Answer, StoreError> {
        let fault = self.0.lock().expect("not poisoned").pop_front();
        match fault {
            None => link.run(command).await,
            Some(Fault::Stall) => Err(StoreError::Unavailable("stalled (a test)".into())),
            Some(Fault::LoseAnswer) => {
                link.run::<Answer>(command).await?;
                Err(StoreError::Unavailable("answer lost (a test)".into()))
            }
        }
    }
}
