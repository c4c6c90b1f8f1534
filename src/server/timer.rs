//! Coarse per-worker timeouts for the phases of a connection (handshake,
//! waiting for a request, reading its head).
//!
//! Why not tokio's timer: a pending tokio timer puts a timeout on the
//! worker's `epoll_wait`, and every such wait arms and cancels a kernel
//! hrtimer (in a VM, reprogramming the timer device traps to the
//! hypervisor); and registering a timer due before all others wakes the
//! driver through its eventfd. On a worker that serves one short
//! connection after another that is every wait and nearly every timer:
//! `bench/ab` measured a build with no connection timers 4 % cheaper per
//! resumed session, and one with a coarse tick in a tokio task no cheaper
//! at all (its 100 ms tick kept a timeout on every wait). Connection
//! timeouts need no millisecond precision (nginx users set
//! `timer_resolution` for the same trade), so here:
//!
//! - a deadline is rounded up to the next tick of [`TICK`] and kept in the
//!   worker's own map: no tokio timer, so the worker's `epoll_wait` has no
//!   timeout;
//! - a thread per worker ticks while any deadline is pending, and for
//!   [`LINGER`] after the last one went, and wakes what is due (a wake from
//!   another thread goes through the eventfd, but only for a timeout that
//!   runs out); idle, it parks until a deadline is registered.
//!
//! A timeout fires between its duration and one tick later. Outside a
//! worker (tests, other runtimes) [`timeout`] falls back to tokio's.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll, Waker};
use std::thread::Thread;
use std::time::Duration;
use tokio::time::Instant;

/// Resolution of the timeouts.
pub const TICK: Duration = Duration::from_millis(100);
/// How long the tick keeps running after the last deadline went.
pub const LINGER: Duration = Duration::from_secs(1);

/// A timeout ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elapsed;

/// One worker's deadlines. Cheap to clone (one `Arc`).
#[derive(Clone)]
pub struct Timers(Arc<Shared>);

struct Shared {
    /// Tick 0.
    epoch: Instant,
    state: Mutex<State>,
    /// The ticking thread (unparked out of an idle spell, and when the
    /// worker's timers go away).
    ticker: Thread,
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.ticker.unpark();
    }
}

/// The deadlines: a slab of entries and, per tick, the entries due then. A
/// dropped timeout frees its entry and takes it out of its bucket at once
/// (each entry knows its place there), so what is kept is bounded by the
/// timeouts pending and the ticks they fall in, not by how many were made
/// before their ticks came (a keep-alive connection makes one per request,
/// each due a timeout later).
#[derive(Default)]
struct State {
    slots: Vec<Slot>,
    free: Vec<u32>,
    buckets: BTreeMap<u64, Vec<(u32, u32)>>,
    /// Entries registered and neither due nor dropped.
    live: usize,
    /// The ticking thread is idle (parked, not ticking).
    idle: bool,
}

#[derive(Default)]
struct Slot {
    gen: u32,
    /// The waiting task; `None` once due (or free).
    waker: Option<Waker>,
    due: bool,
    /// While registered and not due: its bucket, and its index there.
    tick: u64,
    pos: usize,
}

impl State {
    fn register(&mut self, tick: u64, waker: Waker) -> (u32, u32) {
        let idx = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot::default());
                u32::try_from(self.slots.len() - 1).unwrap_or(u32::MAX)
            }
        };
        let slot = &mut self.slots[idx as usize];
        slot.waker = Some(waker);
        slot.due = false;
        let key = (idx, slot.gen);
        let bucket = self.buckets.entry(tick).or_default();
        bucket.push(key);
        slot.tick = tick;
        slot.pos = bucket.len() - 1;
        self.live += 1;
        key
    }

    fn release(&mut self, (idx, gen): (u32, u32)) {
        let Some(slot) = self.slots.get_mut(idx as usize) else {
            return;
        };
        if slot.gen != gen {
            return;
        }
        if !slot.due {
            self.live -= 1;
            let (tick, pos) = (slot.tick, slot.pos);
            if let Some(bucket) = self.buckets.get_mut(&tick) {
                if bucket.get(pos) == Some(&(idx, gen)) {
                    bucket.swap_remove(pos);
                    // The entry moved into its place learns where it is.
                    if let Some(&(moved, moved_gen)) = bucket.get(pos) {
                        if let Some(m) = self.slots.get_mut(moved as usize) {
                            if m.gen == moved_gen {
                                m.pos = pos;
                            }
                        }
                    }
                }
                // An emptied bucket stays until its tick (there are at most
                // as many as ticks in the longest timeout): the next
                // timeout of the same tick reuses it instead of allocating.
            }
        }
        let slot = &mut self.slots[idx as usize];
        slot.gen = slot.gen.wrapping_add(1);
        slot.waker = None;
        slot.due = false;
        self.free.push(idx);
    }

    /// Take the wakers of every live entry due at tick `k` or before.
    fn take_due(&mut self, k: u64, out: &mut Vec<Waker>) {
        while let Some(e) = self.buckets.first_entry() {
            if *e.key() > k {
                break;
            }
            for (idx, gen) in e.remove() {
                let slot = &mut self.slots[idx as usize];
                if slot.gen == gen && !slot.due {
                    slot.due = true;
                    self.live -= 1;
                    out.extend(slot.waker.take());
                }
            }
        }
    }
}

thread_local! {
    /// The worker running on this thread, set by [`Timers::start`].
    static CURRENT: RefCell<Option<Timers>> = const { RefCell::new(None) };
}

impl Timers {
    /// Create this worker's timers and their ticking thread; [`timeout`] on
    /// the calling thread uses them from now on. The thread ends when the
    /// last clone of the returned handle is dropped.
    pub fn start() -> std::io::Result<Timers> {
        let (tx, rx) = std::sync::mpsc::channel::<Weak<Shared>>();
        let ticker = std::thread::Builder::new()
            .name("tlsfront-timer".into())
            .spawn(move || {
                if let Ok(weak) = rx.recv() {
                    tick_loop(weak);
                }
            })?;
        let t = Timers(Arc::new(Shared {
            epoch: Instant::now(),
            state: Mutex::new(State {
                idle: true,
                ..State::default()
            }),
            ticker: ticker.thread().clone(),
        }));
        let _ = tx.send(Arc::downgrade(&t.0));
        CURRENT.with(|c| *c.borrow_mut() = Some(t.clone()));
        Ok(t)
    }

    /// This thread's worker timers, if it is a worker.
    fn current() -> Option<Timers> {
        CURRENT.with(|c| c.borrow().clone())
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding it (there is no code that can) must not
        // take every connection's timeouts with it.
        self.0.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The tick `at` falls in.
    fn tick_of(&self, at: Instant) -> u64 {
        let d = at.saturating_duration_since(self.0.epoch);
        (d.as_nanos() / TICK.as_nanos()) as u64
    }

    /// The instant tick `k` starts.
    fn instant_of(&self, k: u64) -> Instant {
        self.0.epoch + TICK * u32::try_from(k).unwrap_or(u32::MAX)
    }

    /// A future that is ready once `deadline` has passed (at the first tick
    /// at or after it).
    pub fn sleep_until(&self, deadline: Instant) -> Sleep {
        let tick = self.tick_of(deadline) + 1;
        Sleep {
            timers: self.clone(),
            tick,
            key: None,
        }
    }

    /// Wake every deadline of tick `k` and before; whether any is left.
    fn fire(&self, k: u64) -> bool {
        let mut due = Vec::new();
        let live = {
            let mut s = self.state();
            s.take_due(k, &mut due);
            s.live
        };
        for w in due {
            w.wake();
        }
        live > 0
    }
}

/// The ticking thread: sleeps to each tick while deadlines are pending
/// (and [`LINGER`] after), waking what is due; otherwise parks until a
/// deadline is registered. Ends when the worker's timers are gone.
fn tick_loop(weak: Weak<Shared>) {
    let linger_ticks = (LINGER.as_nanos() / TICK.as_nanos()) as u64;
    let mut quiet = 0u64;
    loop {
        let Some(t) = weak.upgrade().map(Timers) else {
            return;
        };
        let next = t.instant_of(t.tick_of(Instant::now()) + 1);
        // Not holding the timers while asleep: dropping them ends us.
        drop(t);
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        let Some(t) = weak.upgrade().map(Timers) else {
            return;
        };
        if t.fire(t.tick_of(Instant::now())) {
            quiet = 0;
            continue;
        }
        quiet += 1;
        if quiet < linger_ticks {
            continue;
        }
        {
            let mut s = t.state();
            if s.live > 0 {
                continue;
            }
            s.idle = true;
        }
        drop(t);
        quiet = 0;
        // A deadline registered from here on finds `idle` and unparks us
        // (an unpark before we park is kept); wake-ups without one just go
        // round again.
        std::thread::park();
    }
}

/// See [`Timers::sleep_until`].
pub struct Sleep {
    timers: Timers,
    tick: u64,
    /// Our entry, once polled: (index, generation).
    key: Option<(u32, u32)>,
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        let mut s = this.timers.state();
        match this.key {
            None => {
                this.key = Some(s.register(this.tick, cx.waker().clone()));
                if s.idle {
                    s.idle = false;
                    drop(s);
                    this.timers.0.ticker.unpark();
                }
                Poll::Pending
            }
            Some((idx, _)) => {
                let slot = &mut s.slots[idx as usize];
                if slot.due {
                    return Poll::Ready(());
                }
                // Still pending: keep the latest waker.
                if let Some(w) = &mut slot.waker {
                    if !w.will_wake(cx.waker()) {
                        *w = cx.waker().clone();
                    }
                }
                Poll::Pending
            }
        }
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Some(key) = self.key {
            self.timers.state().release(key);
        }
    }
}

pin_project_lite::pin_project! {
    /// `f`, or [`Elapsed`] once its deadline has passed: see [`timeout_at`].
    /// A plain struct, not an `async fn`, so a connection task waiting in
    /// one holds `f` once (an `async fn` would keep its argument beside the
    /// copy it polls, and every idle connection would pay for both).
    pub struct Timeout<F> {
        #[pin]
        f: F,
        clock: Clock,
    }
}

enum Clock {
    Worker(Sleep),
    /// Outside a worker: tokio's timer.
    Tokio(Pin<Box<tokio::time::Sleep>>),
}

impl Clock {
    fn until(deadline: Instant) -> Clock {
        match Timers::current() {
            Some(t) => Clock::Worker(t.sleep_until(deadline)),
            None => Clock::Tokio(Box::pin(tokio::time::sleep_until(deadline))),
        }
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        match self {
            Clock::Worker(s) => Pin::new(s).poll(cx),
            Clock::Tokio(s) => s.as_mut().poll(cx),
        }
    }
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(v) = this.f.poll(cx) {
            return Poll::Ready(Ok(v));
        }
        this.clock.poll(cx).map(|()| Err(Elapsed))
    }
}

/// Run `f` until `deadline`: on a worker with the worker's coarse timers,
/// elsewhere with tokio's.
pub fn timeout_at<F: Future>(deadline: Instant, f: F) -> Timeout<F> {
    Timeout {
        f,
        clock: Clock::until(deadline),
    }
}

/// Run `f` for at most `d` (see [`timeout_at`]).
pub fn timeout<F: Future>(d: Duration, f: F) -> Timeout<F> {
    timeout_at(Instant::now() + d, f)
}

/// A deadline that can be moved, for a loop that waits many times under
/// one idle timeout: it stays registered across waits, and moving it within
/// the same tick changes nothing. On a worker it is ready at the first tick
/// at or after the deadline; elsewhere tokio's timer serves it.
pub struct Deadline(Clock);

impl Deadline {
    pub fn at(deadline: Instant) -> Deadline {
        Deadline(Clock::until(deadline))
    }

    /// Move the deadline (earlier or later).
    pub fn reset(&mut self, deadline: Instant) {
        match &mut self.0 {
            Clock::Worker(s) => {
                let tick = s.timers.tick_of(deadline) + 1;
                if tick != s.tick {
                    if let Some(key) = s.key.take() {
                        s.timers.state().release(key);
                    }
                    s.tick = tick;
                }
            }
            Clock::Tokio(s) => s.as_mut().reset(deadline),
        }
    }
}

impl Future for Deadline {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.0.poll(cx)
    }
}

/// Wait `d` (see [`timeout_at`]: on a worker, up to a tick more).
pub async fn sleep(d: Duration) {
    let _ = timeout(d, std::future::pending::<()>()).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn deadlines_fire_within_a_tick_in_order() {
        rt().block_on(async {
            let t = Timers::start().unwrap();
            for ms in [1u64, 150, 420] {
                let d = Duration::from_millis(ms);
                let start = Instant::now();
                let r = timeout(d, std::future::pending::<()>()).await;
                let took = start.elapsed();
                assert_eq!(r, Err(Elapsed));
                assert!(took >= d, "{ms} ms: fired after {took:?}");
                assert!(
                    took <= d + TICK + Duration::from_millis(50),
                    "{ms} ms: {took:?}"
                );
            }
            // A future that finishes first wins, and leaves nothing behind.
            let r = timeout(Duration::from_secs(5), async { 7 }).await;
            assert_eq!(r, Ok(7));
            let r = timeout(Duration::from_secs(5), tokio::time::sleep(TICK)).await;
            assert_eq!(r, Ok(()));
            assert_eq!(t.state().live, 0);
        });
    }

    #[test]
    fn the_tick_rests_when_nothing_is_pending_and_comes_back() {
        rt().block_on(async {
            let t = Timers::start().unwrap();
            let r = timeout(TICK, std::future::pending::<()>()).await;
            assert_eq!(r, Err(Elapsed));
            // Past the linger: the ticking thread is idle.
            tokio::time::sleep(LINGER + 3 * TICK).await;
            assert!(t.state().idle);
            // A new deadline wakes it, and fires on time.
            let start = Instant::now();
            let r = timeout(2 * TICK, std::future::pending::<()>()).await;
            assert_eq!(r, Err(Elapsed));
            assert!(start.elapsed() <= 3 * TICK + Duration::from_millis(50));
        });
    }

    #[test]
    fn dropped_timeouts_are_forgotten() {
        rt().block_on(async {
            let t = Timers::start().unwrap();
            let mut many = Vec::new();
            for _ in 0..100 {
                let mut s = Box::pin(t.sleep_until(Instant::now() + Duration::from_secs(60)));
                // Polled once: registered.
                assert!(futures_poll_once(s.as_mut()).is_pending());
                many.push(s);
            }
            assert_eq!(t.state().live, 100);
            // Dropped in an order that moves entries within their bucket.
            for i in (0..100).rev().step_by(2) {
                many.swap_remove(i);
            }
            assert_eq!(t.state().live, 50);
            assert_eq!(t.state().buckets.values().map(Vec::len).sum::<usize>(), 50);
            drop(many);
            assert_eq!(t.state().live, 0);
            assert!(
                t.state().buckets.values().all(Vec::is_empty),
                "dropped entries left in buckets"
            );
            // Their entries are reused, and a reused entry is not fired
            // early by its former owner's tick.
            // (60 s later than theirs).
            let mut s = Box::pin(t.sleep_until(Instant::now() + Duration::from_secs(120)));
            assert!(futures_poll_once(s.as_mut()).is_pending());
            assert_eq!(t.state().slots.len(), 100);
            let now = t.tick_of(Instant::now());
            assert!(t.fire(now + 700), "the new entry is still live");
            assert!(
                futures_poll_once(s.as_mut()).is_pending(),
                "fired at its former owner's tick"
            );
            assert!(!t.fire(now + 1300));
            assert!(futures_poll_once(s.as_mut()).is_ready());
        });
    }

    fn futures_poll_once(f: Pin<&mut Sleep>) -> Poll<()> {
        let mut cx = Context::from_waker(Waker::noop());
        f.poll(&mut cx)
    }

    #[test]
    fn a_moved_deadline_keeps_one_entry_and_fires_at_its_new_time() {
        rt().block_on(async {
            let t = Timers::start().unwrap();
            let start = Instant::now();
            let mut d = Deadline::at(start + Duration::from_secs(60));
            let mut cx = Context::from_waker(Waker::noop());
            assert!(Pin::new(&mut d).poll(&mut cx).is_pending());
            // Moved within its tick: the same entry stays registered.
            let key = match &d.0 {
                Clock::Worker(s) => s.key,
                Clock::Tokio(_) => panic!("not on the worker's timers"),
            };
            d.reset(start + Duration::from_secs(60) + Duration::from_nanos(1));
            assert!(Pin::new(&mut d).poll(&mut cx).is_pending());
            assert!(matches!(&d.0, Clock::Worker(s) if s.key == key));
            assert_eq!(t.state().live, 1);
            // Moved later, then earlier: one entry, due at the last time set.
            d.reset(start + Duration::from_secs(120));
            assert!(Pin::new(&mut d).poll(&mut cx).is_pending());
            assert_eq!(t.state().live, 1);
            d.reset(Instant::now() + 2 * TICK);
            (&mut d).await;
            let took = start.elapsed();
            assert!(
                took >= 2 * TICK && took <= 3 * TICK + Duration::from_millis(50),
                "{took:?}"
            );
            assert_eq!(t.state().live, 0);
            // Moved again after it fired: it waits again.
            d.reset(Instant::now() + 2 * TICK);
            assert!(Pin::new(&mut d).poll(&mut cx).is_pending());
            assert_eq!(t.state().live, 1);
            drop(d);
            assert_eq!(t.state().live, 0);
        });
    }

    #[test]
    fn outside_a_worker_tokio_times_out() {
        std::thread::spawn(|| {
            rt().block_on(async {
                assert!(Timers::current().is_none());
                let r = timeout(Duration::from_millis(20), std::future::pending::<()>()).await;
                assert_eq!(r, Err(Elapsed));
            })
        })
        .join()
        .unwrap();
    }
}
