//! The client-wide receiver: one port, shared by every concurrent read.
//!
//! A [`Scheduler`] drives one read. A service runs many reads at once, and every one of them
//! crosses the same switch port in front of the client, so the in-flight budget, the sender
//! cap and the hedge budget belong to that port, not to a read. Measured on the testbed
//! (see the README), four reads each holding today's 64 KiB budget put 256 KiB in flight into
//! a 32 KiB port and took kernel RTOs; and every read's latency was the latency of all of
//! them, because they shared the port round-robin. A [`Receiver`] owns the port: every read
//! of a client draws its grants from it.
//!
//! # What it decides
//!
//! - **One budget, one sender cap, one hedge budget.** A grant is issued only while the bytes
//!   requested and not yet received, over all reads, stay within the port's budget B (a grant
//!   may always go out when nothing is outstanding, so no read can stall on the budget), and
//!   while at most K servers, over all reads, have grants outstanding. Hedged bytes draw on a
//!   port-wide token bucket that fills at [`ReceiverConfigBuilder::hedge_fraction`] of the
//!   bytes granted and of the port's measured rate over time, so a slow server cannot make
//!   every read hedge at once (grafana/loki #4826), while a read stuck on a server that never
//!   answers still gets its hedge.
//! - **Shortest remaining read first, with aging.** Grants go to the read with the fewest
//!   bytes left to receive (SRPT, as Homa serves messages: the mean completion time of a batch
//!   drops from about N/2 + 1/2 to about N/4 + 1/2 transfer times... in the ideal case the
//!   first read finishes at 1x, the second at 2x and so on, instead of all at Nx). A read with
//!   a higher [`ReadOptions::priority`] goes first. The port's head read blocks the ones
//!   behind it when its next grant does not fit (as a [`Scheduler`]'s queue head does), so a
//!   large grant is never overtaken forever by small ones.
//! - **Aging halves a read's size per aging bound.** The port orders its reads as if each
//!   read's bytes left were halved once per [`ReceiverConfigBuilder::aging_bytes`] of the
//!   port's time since the read started, counted in the bytes the port could pass in it
//!   (time times the port's rate: the hint, else the rate it measures, see *The port's
//!   rate*; [`Receiver::aging_clock`]). So a read goes before every read of its priority that
//!   starts more than the bound times `log2(its bytes left / theirs)` later: at the default
//!   (12.5 MB, 100 ms of a 1 Gbit/s port) a 1 MiB read before the 32 KiB reads that start
//!   62.5 MB of the port's time later (500 ms at 1 Gbit/s, 5 s at 100 Mbit/s), and a read of
//!   `R` bytes before every read that starts more than `log2(R)` bounds later (a 4 GiB
//!   read: 32). Two reads' order does not depend on when it is asked, so the order stays
//!   sorted and only a read's progress moves it. One level of priority is worth
//!   [`PRIORITY_AGING_BOUNDS`] bounds. Until the fifty-fifth session a read older than the
//!   bound (then 50 ms) went before every younger one, oldest first: a large read outlives
//!   the bound at any load, so it went before every small read that came after it, and
//!   SRPT held only among reads younger than the bound. On the testbed with half the
//!   readers reading small stripes (`incast-bench sweep --mix`), `default`'s small reads
//!   were then 2-39 times slower than a scheduler per read's in six configurations of
//!   seven; with this order, faster in six of seven (1.2-2.9x), and behind in one, where 8
//!   readers of 16 MiB wait about a second for each other and so go first for the tail of
//!   their transfer. The bound trades the small reads' latency for the large ones' where
//!   readers start their next read as soon as the last one ends: the small readers then
//!   keep the port busy, and the large reads took up to 4.4 times a scheduler per read's
//!   time (at 50 ms a halving 2.2 times, at 250 ms 10 times). Where reads arrive on their
//!   own at 0.5-0.8 of the line rate (`sweep --load`), both kinds were faster than with a
//!   scheduler per read (docs/measurements.md, *Fifty-fifth* and *Fifty-sixth session*).
//!
//!   *Why the port's time, not time.* Until the fifty-sixth session the bound was 100 ms.
//!   A read's transfer takes ten times as long at 100 Mbit/s as at 1 Gbit/s, so in time the
//!   same bound aged every read ten times faster against its own size: the tail of a 4 MiB
//!   read was old enough to go before the small reads, which at 100 Mbit/s lost to a
//!   scheduler per read's (37 against 28 ms with readers in a closed loop, 99 against 53 ms
//!   at 0.8 of the line rate). On the port's clock the order is the same at every rate, and
//!   on a 10 Gbit/s port or loopback a large read is not held back ten times longer than at
//!   1 Gbit/s. Why not the bytes the reads actually received: tried first, that clock slows
//!   where the port is under-full, as where the small reads' CPU is the limit, so the large
//!   reads waited longer and the port filled less (16 x 64 KiB beside 8 x 4 KiB, 16
//!   readers: the large reads 755 ms against 503, the port 0.69-0.71 full against
//!   0.73-0.76, in two runs each).
//! - **A read that ends gives its share back at once.** [`Receiver::finish_read`] forgets
//!   its grants; their bytes no longer count against the port.
//!
//! # The control law (closed loop)
//!
//! The budget follows what the receiver measures on every grant, in the spirit of Swift
//! (Kumar et al., SIGCOMM 2020: a target delay, additive increase, a multiplicative decrease
//! proportional to the excess delay), DCTCP/ICTCP (the receiver reacts to congestion before
//! the 200 ms timer does) and Homa (Montazeri et al., SIGCOMM 2018: a receiver grants about
//! RTTbytes, one bandwidth-delay product, plus a little overcommitment):
//!
//! - **Queueing delay.** A grant issued on an idle connection gives a clean first-byte time
//!   (no other grant's transfer ahead of it on its connection). Less the time the hosts
//!   spent on it where the transport says ([`Receiver::on_bytes_timed`], see *Host time is
//!   not the port's queue*), its excess over the smallest such time seen (the base RTT) is
//!   the queueing delay the path added. Above [`ReceiverConfigBuilder::target_delay`] the budget stops growing for a
//!   round trip (after slow start, see *Growth*); above [`SEVERE_DELAY_FACTOR`] targets it shrinks by
//!   `max(1 - BETA * (delay - target) / delay, 1 - MAX_DECREASE)` ([`BETA`],
//!   [`MAX_DECREASE`], Swift's form and constants), unless the delay is over
//!   [`SLOW_PORT_MARGIN`] times what the port's rate takes to drain every byte the receiver
//!   has there (its budget, or the bytes outstanding and not held if more): such a queue is
//!   not the budget's, whoever built it. (On loopback, with a 5 ms store, samples of 3-6 ms
//!   of "path" on budgets that drain in under a millisecond halved the budget 3-9 times a
//!   row: the first bytes of connections still opening, and a 2-core client late to send.)
//!   Why not shrink at the target itself, as
//!   Swift does: on this project's 2-core hosts the first-byte time of a loaded loopback
//!   path is mostly CPU scheduling, and shrinking on it held 16 concurrent loopback reads to
//!   0.5x of `naive` (measured: 133 delay decreases in 3 s, no loss).
//! - **Whose queue.** A queue only holds growth, or shrinks the budget on severe delay, when
//!   the receiver's own grants built it: when it takes at least [`OWN_QUEUE_SHARE`] of the
//!   port, counted in the bytes of the port's receive counter where the transport gives one
//!   (see *The port's counter*), else as its delivery rate against the port's rate (the rate
//!   hint, else the largest it measured in the last [`BASE_RTT_WINDOW`], see *The port's
//!   rate*). Below that, the queue
//!   belongs to traffic the receiver does not grant, such as bulk TCP flows through the same
//!   port, which keep the buffer full whatever the reads do. Reacting to their
//!   queue handed them the port: with 2 cubic bulk flows on the testbed the reads got
//!   250-370 Mbit/s of 920; without it, 282-466 in two runs. Copa (Arun and Balakrishnan, NSDI
//!   2018) makes the same call with its competitive mode; loss still bounds the budget.
//!   Without a rate hint, reads that other traffic starves measure only their own small
//!   rate and count its queue as theirs; see *A deep queue of other traffic* for how the
//!   receiver tells then.
//! - **Loss.** Once per smoothed RTT the receiver takes the share of responses whose server
//!   reported retransmits ([`Receiver::on_loss`]; QUIC loss events count too) or that
//!   stalled in slow start or on a port whose servers report loss (see *Stalls count where
//!   loss is reported*), folds it into DCTCP's moving average `alpha` (gain
//!   [`ALPHA_GAIN`], starting at 1), and if any response of the window saw loss, shrinks B
//!   by `alpha / 2`. So the first loss halves B, as TCP would, while a steady trickle of
//!   loss (bulk flows filling the port) shrinks it a little each round trip instead of
//!   pinning it at the floor. A kernel RTO a server reports halves B at once
//!   ([`LOSS_DECREASE`]). The transport reports only retransmits that lost something:
//!   incast-rpc's servers leave out those their peer reported as duplicates (D-SACK), since
//!   a retransmit whose original arrived says nothing of the buffer. On the 2-core testbed
//!   at 5-10 Gbit/s with no switch drop, nearly all retransmits were such (tail-loss probes
//!   to a client late to acknowledge, fast retransmits of reordered segments). Counted as
//!   loss they held B at 150-250 KiB on a 10 Gbit/s port, and in three of four runs one of
//!   the rows of 4 reads of 256 KiB fragments read 0.79-0.92x of `naive`; left out, those
//!   rows read 0.95-1.17x in three runs (docs/measurements.md, *Fifty-first session*).
//! - **At most one decrease per smoothed RTT**: the samples of one congestion event arrive
//!   together.
//! - **Growth.** Until the first decrease that lowers it, B grows by the bytes each completed grant
//!   delivered (doubling per round trip, like TCP's slow start), so a fast path is not held
//!   to the initial budget for long, and a delay over the target does not hold it: before
//!   any loss or severe delay, a late first byte on a 2-core host is mostly CPU scheduling
//!   (loopback, 16 reads of one server: 19,495 of 22,406 samples over the target, and the
//!   budget held at 1-2 MiB); the bandwidth-delay cap below still bounds it. Measured
//!   (docs/measurements.md, *Sixth session*): with a server that sent each `End` in its
//!   response's last write (since reverted) it lifted those reads from 43 to 49 Gbit/s; with
//!   the `End` in a segment of its own the change is within the noise (0.90-0.94x of `naive`
//!   against 0.92-0.97x without it). It acts only until the first decrease, which on a lossy port
//!   comes within the first blocks. A decrease that finds B at its floor leaves slow start
//!   on: bytes that fit the floor did not overflow the port, and the first grants to slow
//!   stores stall before any hold is learnt (ended there, B grew by a chunk per 7 ms round
//!   trip from 16 KiB). After the first decrease, by [`ADDITIVE_INCREASE`] bytes per budget's
//!   worth of delivered bytes (about one grant per round trip). Growth stops at
//!   [`OVERCOMMIT`] times the port rate's bandwidth-delay product plus the target queue
//!   (Homa's RTTbytes and overcommitment): more would only queue. Its round trip is the
//!   servers' quickest answer, or on a port clean of loss their usual one (see *Host time is
//!   not the port's queue*). The port's rate, not the
//!   receiver's own: sharing the port with bulk flows, the reads' own rate made the cap
//!   shrink with their share, and the share with the cap. B never goes below
//!   its floor (see *A floor that follows the path*) nor above
//!   [`ReceiverConfigBuilder::max_budget`].
//! - **Grant size follows the rate and the budget.** A new chunk carries at least
//!   [`GRANT_TIME`] at the port's rate (the hint, else the largest measured lately; at most a
//!   quarter of the budget), so on a 10-100 Gbit/s path the request overhead does not cap
//!   the read, while on a 1 Gbit/s port the policy's chunk stands. An enlarged chunk that
//!   would leave less than a whole chunk behind takes the rest along: a 256 KiB fragment on
//!   loopback was two grants per read, now and then, where `naive` sends one request. So
//!   does one whose whole fragment fits half the budget: at 10 Gbit/s, where the 2-core
//!   testbed's CPU is the limit, 256 KiB fragments were two or three grants at up to a
//!   quarter more CPU per GiB than `naive`'s (docs/measurements.md, *Thirty-ninth session*).
//!   A read of one fragment alone on a port that reports no loss takes its whole rest in
//!   one grant when that fits the room, else half the budget: its quarter-budget chunks
//!   shared the budget with no one, and at 10 Gbit/s one read at a time from one server
//!   took 3-20 grants per fragment (docs/measurements.md, *Sixty-first session*). Where
//!   servers report loss it keeps the quarter-budget chunks: larger grants are larger
//!   bursts.
//!   A budget under [`MIN_GRANTS_PER_BUDGET`] policy chunks shrinks the chunk to half the
//!   budget (never under [`MIN_CHUNK`]), so that one grant transfers while the next one's
//!   request travels instead of one grant at a time. An enlarged grant of at most two
//!   policy chunks that does not fit the budget's room shrinks to it, if the room holds a
//!   policy chunk: at 2 Gbit/s a 32 KiB fragment is one grant, the budget beside bulk
//!   flows only two or three of them, and a grant waiting for the rest left it 55-65% full
//!   (docs/measurements.md, *Thirteenth session*). It does so only where the budget holds
//!   fewer than [`GRANTS_PER_BUDGET`] grants of its size; in a larger budget it waits for
//!   its room, which comes back soon. With several reads at once that budget is always
//!   nearly full, so every grant found room for one policy chunk: 32 KiB fragments went in
//!   1.2-2 grants each at 2.5 and 10 Gbit/s, on a machine whose CPU was the limit
//!   (docs/measurements.md, *Sixty-second session*).
//! - **Timeouts learn from spurious hedges.** A hedge whose original still completed first
//!   doubles a port-wide multiplier of the grant timeouts (up to [`MAX_TIMEOUT_SCALE`]); a
//!   hedge that won halves it. (Eifel/F-RTO do the same for TCP's RTO.) Both steps
//!   multiply, so the multiplier drifts up where most hedges are spurious (16 loopback
//!   reads of 64 CPU-bound servers: 3 of 4) and stays near 1 where most win (beside bulk
//!   flows: 3 of 4 won). A won hedge used to lower it by one: one burst of spurious hedges
//!   (a scheduling hiccup stalls many grants at once, and their originals all end) then
//!   held the timeouts at 16-56 times the RTO for as many won hedges, and beside 2 bulk
//!   flows at 2 Gbit/s stalled grants waited 5-48 ms for their hedge (docs/measurements.md,
//!   *Twelfth session*). A verdict is about the multiplier the hedge's stall timer ran
//!   under, not about the one in force when the verdict comes: a spurious hedge raises the
//!   multiplier to twice its own, a won one lowers it to half its own, and hedges whose
//!   timers ran under the same multiplier move it once between them, as TCP cuts its window
//!   once per round trip of losses. Counted per hedge, one scheduling pause that stalled ten
//!   grants at once took the multiplier from 1 to 64 as their originals ended, and the
//!   next stalled grant waited 83 ms for its hedge (1 Gbit/s beside 2 bulk flows, 16 x
//!   32 KiB, one read in 300 over 100 ms; docs/measurements.md, *Twenty-third session*).
//!   A scaled timeout never passes the RTO's upper bound
//!   ([`crate::RtoBounds::max`], 100 ms by default): past the kernel's 200 ms minimum RTO a
//!   hedge comes after TCP's own retransmission and saves nothing.
//! - **Receiver-paced responses (optional, [`ReceiverConfigBuilder::pacing`]).** A grant
//!   may carry a pacing rate its server applies to that response (incast-rpc sets
//!   `SO_MAX_PACING_RATE`, TCP's own pacing): [`PACING_GAIN`] times the port's rate times
//!   the grant's share of the bytes outstanding. The grants in flight then arrive together
//!   at about the port's rate, where unpaced each sender's NIC bursts at its line rate and a
//!   few of them at once overflow a shallow buffer. Measured results and why it is off by
//!   default: see the README. One case is paced whatever this setting: answers held by
//!   slow stores on a lossy port (see *Held answers are paced on a lossy port*).
//!
//! # Host time is not the port's queue
//!
//! A first byte's time holds the path (the request's way out, the port's queue, the
//! response's way in) and the hosts: the server's time from the request's arrival to its
//! first write, and the client's from the byte's arrival to its read. Swift (Kumar et al.,
//! SIGCOMM 2020, section 3.2) splits the two: it stamps packets in the NICs, runs a fabric
//! window on the fabric delay and an endpoint window on the hosts' delay, and found the
//! hosts' delay large under load. Without NIC stamps the kernel's receive timestamps do it
//! here: incast-rpc's server stamps each request as it reaches its kernel
//! (`SO_TIMESTAMPNS`) and sends the time until its first write in that response's first
//! `Data` frame, and the client stamps the response's first bytes the same way and counts
//! how long they waited for it. The transport hands both to [`Receiver::on_bytes_timed`].
//! A request that waited for its connection to open waited on the client too: incast-rpc
//! adds that wait to the client's part of the connection's first response (counted as the
//! path's, connects of up to 13 ms on a loaded 2-core loopback read as queues of 3-6 ms).
//!
//! The parts answer different questions, so each rule reads the one it needs
//! ([`HostTime`] carries the server's and the client's apart):
//!
//! - **The delay rules read the path.** Whether the reads' own queue at the port is past
//!   the target (holding growth, the severe-delay decrease, the delay a loss teaches as a
//!   target, [`ReceiverStats::delay_holds`]) is read from the first byte's time less both
//!   hosts' time, over the smallest such time in [`BASE_RTT_WINDOW`]. A busy host's time is
//!   not a queue at the port, and a smaller budget does not make the host faster.
//! - **The growth cap covers the servers, not the client.** The base RTT of the
//!   bandwidth-delay product (the growth cap, the floor that follows the path) is the
//!   smallest first-byte time less the client's own wait. A server that takes milliseconds
//!   to answer (a disk) needs that much of the port's rate outstanding to keep the port
//!   busy (Little's law); a client late to read its sockets is the limit itself, and more
//!   bytes in flight only add to its work. Both other choices lost, measured on the 2-core
//!   testbed (docs/measurements.md, *Thirty-sixth session*):
//!   - with the whole time in the cap (no delay hold any more, so the budget sat at it),
//!     the rows of 4 KiB fragments, where the host is the limit, read 0.81-0.96 of the line
//!     rate under `bbr` with budgets of 100-188 KB, against 0.94-0.97 before (the grid 0.939
//!     and 0.964 against 0.981);
//!   - with the path alone in it, servers that take 2 ms to answer got a budget of a
//!     fraction of their service time, reads slowed, and the membership test under churn
//!     (`reads_keep_succeeding_while_servers_leave_and_join_under_load`) failed in 3 of 8
//!     runs (0 of 8 otherwise).
//!
//!   On this testbed the servers share the client's two cores, so their hold is partly
//!   the client's CPU too; under `bbr` the grid read 0.965 with this cap.
//!
//!   **The usual answer on a clean port.** The smallest first-byte time holds the servers'
//!   quickest answer, and Little's law asks for their usual one. On loopback, where
//!   `naive`'s requests all wait at the servers, the hosts took a mean 0.3-0.55 ms over a
//!   base of 45-70 us, and the cap held the budget of reads of 256 KiB fragments at
//!   1.3-1.6 MiB (five or six fragments). Where the port's servers reported no loss for
//!   [`CLEAN_PORT_WINDOW`], the cap's round trip is the path's base plus the servers'
//!   smoothed host time (their hold less their stores' part), when that is longer: over
//!   must-show 4's loopback grid, 16 alternated rounds a cell, 1.03-1.16x of the goodput
//!   by cell (1.06x by geometric mean; docs/measurements.md, *Sixty-fourth session*). Only
//!   there: the servers' time grows with the requests queued at them, so a cap that
//!   follows it feeds itself until the port overflows. Behind the testbed's 32 KiB port at
//!   1 Gbit/s it read 1.03x over 18 rows with 67 times the switch drops without the
//!   window, 1.03x with 6.5 times them with a window of 1 s, and 1.00x with 1.6 times them
//!   with this one (no kernel RTO in any): a port that overflows is answered by the
//!   quickest answer's cap, and one that has not for ten seconds has room for the usual
//!   one.
//!
//!   **A new port is not clean yet.** Until the sixty-sixth session a port whose servers
//!   had reported nothing counted as clean, so a new client's first slow start grew to the
//!   usual answer's cap before the first loss could be reported (64 x 16 KiB behind the
//!   testbed's 32 KiB port: a budget of 1.3 MB) and overflowed the port at once. A port now
//!   counts as clean ([`Receiver::is_clean`]) [`CLEAN_PORT_PROBATION`] after its servers'
//!   first counters if none reported loss since, and never without counters: nothing is
//!   known of its buffer then. With alternated rounds in one run each (docs/measurements.md,
//!   *Sixty-sixth session*), behind the 32 KiB port at 1 Gbit/s the switch dropped 0.61x
//!   as much over 18 rows of must-show 1's fragments (4,485 against 7,381) and 0.45x over
//!   8 rows of 64 KiB and 1 MiB fragments, at 1.02x and 1.00x the goodput by geometric mean
//!   (0.96-1.07 by row); at 2.5 Gbit/s behind 64 KiB, 0.47x the drops at 1.01-1.04x. On
//!   loopback, where nothing drops, must-show 4's grid read 1.00x and 0.99x (0.92-1.05 by
//!   cell, as noisy as two rounds of the same build), and at 10 Gbit/s, where the machine
//!   is the limit, 1.09x and 0.995x.
//! - **The round trip stays whole** for the smoothed RTT (stall timers, the loss rule's
//!   window) and for the test for a standing queue of other traffic (*A deep queue of
//!   other traffic*), whose competing cap is a smoothed round trip at the port's rate.
//!   Read from the path, beside 2 bulk flows (whose senders load the same two cores) that
//!   test fired 0-3 times a row instead of 5-45 (a 32 KiB port queues at most 262 us, under
//!   its threshold of two targets), and the reads got 41.4% of the line rate with 2 rows
//!   of 8 under 1/3, against 52.9% with none.
//!
//! A first byte clamped to the moment its grant went late (*Late grants leave the budget*)
//! keeps its hosts' time in: the clamp already cut it (taken out, it had set the path's
//! base to 0-15 us beside bulk flows).
//!
//! Why it matters here: on a 2-core host the hosts' time is most of a loaded first byte.
//! 16 reads of 64 servers on loopback read first bytes a mean 314-414 us over a base RTT
//! of 62-64 us, over the 200 us target in 19,500 of 22,000 samples a round, and the
//! budget sat at 0.4-1.3 MB, where a fixed 1.3 MB read as much as `naive`. Less the hosts'
//! time, the path's delay was a mean 47-51 us (docs/measurements.md, *Thirty-sixth
//! session*).
//!
//! # The port's rate
//!
//! Without a hint ([`ReceiverConfigBuilder::port_rate_bps`]) the receiver measures the
//! port's rate, and several rules lean on it: the bandwidth-delay cap on growth, the
//! competing cap, grant sizes, whose queue a delay is, and whether a port is slow (see *A
//! slow port is not a deep queue*). It keeps the largest rate it measured in the last
//! [`BASE_RTT_WINDOW`]: beside bulk flows the reads' own rate is a share of the port, and
//! the largest they took lately is the best they know of it. The largest of many samples
//! is only as good as the worst of them, so none may be lifted by bytes that passed the port
//! before it began, nor by a host late to read them:
//!
//! - **Busy time only.** A sample adds the time between two arrivals only while the
//!   receiver's bytes were outstanding all along; when none are, the port may idle, and the
//!   next arrival begins a new busy period.
//! - **Not the first round trip of a busy period.** A port that idled passes its first bytes
//!   faster than its rate: a token bucket (tbf's, 16 KiB on the testbed, 1.3 ms of a
//!   100 Mbit/s port and 13 ms of a 10 Mbit/s one) lets them through at once, and a NIC's
//!   coalesced interrupt hands them over together, and a client late to read its sockets
//!   reads at once what waited in them. The arrivals of a busy period's first smoothed RTT,
//!   and at least of its first [`RATE_SAMPLE_SKIP`], do not count (with the RTT alone,
//!   reads of 64 KiB read a 1 Gbit/s port as 1.31-1.38 Gbit/s on the testbed).
//! - **Long samples.** A sample spans at least [`RATE_SAMPLE_SPAN`] and [`RATE_SAMPLE_RTTS`]
//!   smoothed RTTs of busy time: a host late by 1 ms to read its sockets lifts it by 20% at
//!   most.
//! - **The median of three.** The rate kept is the largest median of the last
//!   [`RATE_SAMPLE_MEDIAN`] samples in a row, not the largest sample: at 100 Mbit/s on the
//!   testbed most samples read 92-95 Mbit/s and about 1 in 500 read 115-145 (the 2-core
//!   client late to read its sockets by more than a millisecond), and one such sample,
//!   kept for 10 s, let the budget past the buffer again.
//!
//! Where the transport gives the port's receive counter, the same samples are taken of it
//! too, and the larger rate counts (see *The port's counter*): beside other traffic the
//! reads' own bytes measure only their share.
//!
//! Until the first such sample, the rate is the largest smoothed delivery rate of the
//! receiver's bytes (intervals of [`RATE_INTERVAL`] and one smoothed RTT, idle time
//! included), as it was before. That rate read a 10 Mbit/s port as 28-51 Mbit/s and a
//! 100 Mbit/s one as 114-147 Mbit/s on the testbed (16-256 senders of 4 KiB, one read at a
//! time, each starting on an idle port): the bucket's burst at the start of every read, in
//! intervals of 500 us to a few ms, and the largest of their smoothed values kept for 10 s.
//! Taken for the port's rate it let the budget grow past the buffer and the bucket
//! together (90 KB on a 48 KB port), and each lost tail cost a probe of a round trip that
//! a 10 Mbit/s queue makes 20-50 ms long. With the busy-time samples the same ports read
//! 9.3 and 93-106 Mbit/s; at 100 Mbit/s the switch dropped 492 and 2,458 packets in two
//! runs of those 12 rows (4,238 and 8,265 before) and the receiver hedged 13 and 194 times
//! (539 and 609). Measured results: docs/measurements.md, *Twenty-ninth session*.
//!
//! # The port's counter
//!
//! A port is one resource whoever fills it, and the client's network interface counts every
//! byte it passed: Linux's `rx_bytes`, which the transport hands over with
//! [`Receiver::on_port_bytes`] (incast-rpc reads it from `/proc/thread-self/net/dev` at
//! most once a millisecond; [`ReceiverStats::counter_samples`] says whether it did). The
//! receiver samples it over its busy time by the rules of *The port's rate* (busy all along,
//! not the first round trip of a busy period, spans of [`RATE_SAMPLE_SPAN`], the largest
//! median of three), and counts its own bytes over the same intervals. That gives two
//! things its own bytes cannot:
//!
//! - **The port's rate with every flow counted.** Beside bulk flows the reads' own bytes
//!   measure their share: a 1 Gbit/s port read as 0.92-0.97 Gbit/s alone and as 0.44-0.96
//!   beside 2 bulk flows on the testbed, a 2 Gbit/s one as 1.34-1.92. The counter read them
//!   as 1.0-1.02 and 2.01-2.06 (it counts headers too: about 4.5% more than the payload at
//!   an MTU of 1500). Until the counter has taken [`RATE_SAMPLE_MEDIAN`] samples, the
//!   reads' own measure is only raised to the counter's where that is higher: one sample
//!   of the counter taken over a stall, before the reads' own first, once stood for a
//!   1 Gbit/s port at 112 Mbit/s. From then on the counter's is the port's rate, lower
//!   than the reads' own too: the reads' bytes are a part of the port's, and a client late
//!   to read its sockets counts in its busy time bytes that passed the port before it.
//!   With slow stores the port is busy in short spells, and the reads' own measure knew a
//!   1 Gbit/s port at up to 2.04 Gbit/s on the testbed (a 5 ms store, 64 x 256 KiB x 4):
//!   the credit of held bytes (*Bytes in a store are not in the port*) then filled at twice
//!   the port's rate (docs/measurements.md, *Forty-fifth session*).
//! - **Whose queue, counted.** The reads' share of the port's bytes replaces the ratio of
//!   their delivery rate to the port's rate in every rule that asks whose a queue is
//!   ([`OWN_QUEUE_SHARE`], [`CEILING_RATE_SHARE`]): the median of the last three samples'
//!   shares (the upper of two), while the newest is younger than [`BASE_RTT_WINDOW`]. Alone
//!   on the port the share is about 0.95, whatever the host's CPU does to the reads' rate;
//!   beside 2 bulk flows, what the reads get. With the rate alone, a 6% higher port rate
//!   (the counter's, headers included) against the reads' payload rate let 4 KiB rows on a
//!   loaded 2-core host start competing on CPU delays (holding budgets of 312-452 KB at
//!   1 Gbit/s, 1,595 switch drops in one 100 Mbit/s row). And where the share is
//!   [`CEILING_RATE_SHARE`] or more the receiver does not compete (see *A deep queue of
//!   other traffic*): a standing queue of other traffic needs other traffic. Without that, a
//!   budget its own losses brought near the floor at 100 Mbit/s still started competing with
//!   its own queue now and then, and stayed (1,501 switch drops in one row).
//!
//! Measured side by side with the same client without the counter (`own-rate` in the bench):
//! beside 2 bulk flows the reads got 56.6-57.2% of the line rate against 48.9-49.4% at
//! 1 Gbit/s and 53.5-54.1% against 42.3-46.6% at 2 Gbit/s, as much as told the port's rate
//! (55.6-56.2% and 55.0%); without bulk flows the same within the noise (18 rows at 1 Gbit/s:
//! 96.0% against 95.8%; 12 at 100 Mbit/s: 97.5% both), rows of one read of 1024 x 4 KiB
//! (CPU-bound) lower in three runs of four.
//!
//! Its busy time bridges the reads' short pauses ([`COUNTER_GAP_RTTS`]): between a grant's
//! last byte and its replacement's first, the reads have nothing outstanding for about a
//! round trip, and a read held to two grants pauses so at every pair. Its own bytes cannot
//! tell the port's rate over such a pause (the port may idle), but the counter counts
//! whatever the port passed, and the pause's time is in the sample, so a token bucket that
//! filled over it adds no more than it held back. Without the bridge, beside 2 bulk flows
//! at 2 Gbit/s, a read whose budget losses had taken to 8 KiB took no sample of the counter
//! in a whole row, judged its starved share the whole port (85-617 Mbit/s, all of it its
//! own) and let its floor follow that path: 0.12-0.28 of the line rate in 8 of 44 runs of
//! one row, none under 1/3 in 16 runs with it (docs/measurements.md, *Thirty-seventh
//! session*).
//!
//! What it does not know: traffic that reaches the interface by another path than the port
//! of the reads (two uplinks, or a bottleneck further in the network shared with flows to
//! other hosts) counts as the port's. Measured results: docs/measurements.md, *Thirty-first
//! session*.
//!
//! # A buffer shallower than the target
//!
//! The target delay holds the budget below the point where the port's buffer overflows only
//! if the buffer can hold that much queue: a 32 KiB port at 1 Gbit/s holds 262 us, over the
//! default 200 us target, but a 16 KiB port only 131 us. There the queue never reached the
//! target, only loss bounded the budget, and DCTCP's `alpha / 2` (small when loss is
//! steady) kept it at the edge: hundreds of loss decreases per configuration, 55-97% of the
//! line rate and up to 115 kernel RTOs (docs/measurements.md, *Other port buffers*). So the
//! receiver learns the target from the loss: at a loss decrease, while the queue is its own, the
//! target becomes [`LOSS_TARGET_SHARE`] of the largest queueing delay seen since the
//! previous loss decrease, the queue at which the buffer overflowed (about its size over its
//! rate), never under [`MIN_TARGET_DELAY`] nor over the configured target. The learnt target
//! holds growth and bounds the budget's cap (the bandwidth-delay product plus the target
//! queue), not the severe-delay decrease; it lapses [`TARGET_HOLD`] after the loss that
//! set it, so a path whose buffer grew is probed again. This is Swift's target delay with
//! its level found from the path, as BBR finds its rate; on a path without loss (loopback,
//! deep buffers) nothing changes.
//!
//! Only a loss a server reported teaches it, as only such a loss teaches a ceiling (*A
//! ceiling learnt from loss*): a stall in slow start counts as loss for the budget, but on
//! a busy host it comes from the CPU. And it lapses after a second, not after
//! [`BASE_RTT_WINDOW`] as it did until the fifty-ninth session: with the delay samples of a
//! 2-core host it is most often [`MIN_TARGET_DELAY`], which caps growth at twice the
//! bandwidth-delay product plus 50 us (29-32 KB at 1 Gbit/s, under what the servers'
//! answer time needs), so one early loss, or on loopback one stall in slow start, held the
//! budget there for the ten seconds: in 15 of 90 rounds of rows of 16-32 KiB fragments
//! from 64-1024 senders behind a 32 KiB port, 11 of them at 0.68-0.90 of the line rate,
//! with few drops or none; on loopback the configurations of must-show 4 with one read at
//! a time ran their three rounds under a target of 50-89 us learnt so. After a second the
//! budget grows again and a loss teaches the target anew. Measured
//! (docs/measurements.md, *Fifty-ninth session*; alternated rounds, no kernel RTO in any):
//! 64 and 1024 senders of 32 KiB fragments and fixed 1 MiB blocks, 1 and 16 reads, 1.046x
//! of the previous rule's goodput over three rounds (geometric mean over 8 rows, rows
//! 0.94-1.23x) with 1.9 times its switch drops, no row held for its whole length (none in
//! 42 row-rounds, 15 in 90 under the previous rule); must-show 1's whole grid over two
//! rounds 0.99x (rows 0.91-1.15x) with 1.2 times the drops; behind a 16 KiB port 0.999x
//! with as many drops. Lapsed after [`CEILING_HOLD`] instead: 2.7 times the drops behind that 16 KiB port.
//!
//! It needs the smaller chunks of [`MIN_GRANTS_PER_BUDGET`]: the budget it keeps is about
//! two policy chunks. Measured on the testbed's 16 KiB port (12 configurations, one run
//! each, mean goodput and kernel RTOs over them): before, 716 Mbit/s and 182 RTOs; smaller
//! chunks alone, 713 and 236; the learnt target alone, 733 and 28 (one grant at a time,
//! 36-72% of the line rate at SRU 32 KiB); both, 830, 831 and 783 Mbit/s and 35-54 RTOs in
//! three runs. On the
//! 32 KiB port both together gave 925 Mbit/s and 1 RTO over 18 configurations, against 918
//! and 9. The delay samples are noisy here (their mean was 110-300 us on a port that can
//! queue 131 us: the 2-core host's scheduling), so the learnt target is often the floor or
//! the configured one; it still cut the RTOs.
//!
//! (Those runs predate the testbed's cap on the hosts' super-packets, docs/measurements.md,
//! *Tenth session*: until then a unit of up to 16 KiB reached a 16 KiB port whole, so it was
//! dropped whenever the queue held anything. With units of at most half the buffer the same
//! 16 KiB port at 1 Gbit/s reads 96-99.6% of the line rate, with no kernel RTO.)
//!
//! # A floor that follows the path
//!
//! A constant floor is a budget sized for one path. 16 KiB is about a bandwidth-delay
//! product plus the target queue at 1 Gbit/s, and it keeps the reads' share beside bulk
//! flows whose losses would otherwise cut the budget to nothing; but on a slow port with a
//! shallow buffer it is more than the buffer and the path hold together, and no loss can
//! take the budget under it. Measured without a hint (docs/measurements.md,
//! *Thirty-third session*): at 100 Mbit/s behind an 8 KiB port the budget sat at 16 KiB in
//! every row, the switch dropped 1,000-3,500 packets a row and the reads got 0.79-0.84 of
//! the line rate, where the same client told the port (`ReceiverConfig::for_port`, a floor
//! of 7.2 KB) read 0.98 with 2-3 drops a row; at 200 Mbit/s behind 8 KiB 0.81-0.96; at
//! 50 Mbit/s behind 12 KiB, 0.88-0.98 against 0.98. With the floor below: 0.981-0.983
//! (27-56 drops a row), 0.974-0.985 and 0.975-0.984, as much as with the port told or more;
//! at 1 Gbit/s (32 and 16 KiB ports) and 100 Mbit/s behind 32 KiB within the runs' spread.
//!
//! So unless the user sets one ([`ReceiverConfigBuilder::min_budget`]), the floor of a loss
//! decrease follows the path where the loss is one the reads' own budget caused, by the
//! test that lets a loss teach a ceiling (the queue is theirs and they take at least
//! [`CEILING_RATE_SHARE`] of the port's bytes): there it is the port's bandwidth-delay
//! product plus the configured target queue (the growth cap's RTTbytes, without the
//! overcommitment), at most [`DEFAULT_MIN_BUDGET`] and at least [`MIN_PATH_FLOOR`]. A
//! budget that low still keeps the port busy, since it holds a round trip at the port's
//! rate and a target's queue to ride the host's noise, and only losses at the 16 KiB floor
//! bring it there. At 1 Gbit/s the product is over 16 KiB, so nothing changes there.
//! Beside other traffic the floor stays at 16 KiB (when such traffic comes the budget
//! grows back to it rather than jumping).
//!
//! The configured target, not the learnt one (*A buffer shallower than the target*): the
//! learnt target falls to [`MIN_TARGET_DELAY`] on the noisy samples of a 2-core host, and
//! with it the floor at 1 Gbit/s fell to 10-14 KB (a base RTT of 35-40 us): in three
//! alternated runs of the 1 Gbit/s grid 96.4-97.0% of the line rate against 97.1-97.5%,
//! and behind a 16 KiB port 97.4% against 98.1%.
//!
//! Loss, not delay: a severe-delay decrease keeps the configured floor. On a slow port the
//! 16 KiB floor queues far past the target without overflowing a buffer that holds it, and
//! taken under it by delay (100 Mbit/s, 32 KiB port, the first form of this rule) the
//! budget spent itself in 4 KiB grants, twice as many per block, with 4-10 times the drops
//! and 0.7-1.1 points less goodput in 3 of 12 rows. The first form also lowered the floor
//! where the reads merely took [`OWN_QUEUE_SHARE`] of the port: beside 2 bulk flows at
//! 100 Mbit/s it doubled the grants per block in 3 of 8 rows.
//!
//! # A ceiling learnt from loss
//!
//! The learnt target needs delay samples that tell the port's queue from the host's noise,
//! and at 1024 senders they do not: their mean was 310 us on a port that can queue 262 us,
//! the learnt target stayed at the configured 200 us, growth stopped only at twice the
//! bandwidth-delay product plus that target (58 KiB on a 32 KiB port), and the budget lived
//! at the loss edge: 1,620 loss decreases, 1,791 switch drops and 5 kernel RTOs in one
//! 4-second configuration (1024 x 32 KiB, one read). So a loss also teaches a budget: at a
//! loss decrease, while the queue is the receiver's own, the budget may not grow past
//! [`LOSS_CEILING_SHARE`] of the budget that lost (and is cut to that at once). A loss at
//! or under the ceiling leaves it: under it, the budget was cut below it already or another
//! flow filled the buffer, so a busy neighbour does not ratchet it down; at it, see *Losses
//! at the ceiling* below. A ceiling lasts [`CEILING_HOLD`] from the loss that set it: where
//! the budget sits at it and loses nothing, the loss that set it was a passing burst's;
//! where the budget keeps losing under it, DCTCP's `alpha` shrinks it, and the first loss
//! over the ceiling once it lapsed sets the next one. (Held for
//! [`BASE_RTT_WINDOW`] instead, one early loss held the budget at the floor, 29-31 KiB, for
//! whole 4-second configurations of 64-1024 senders and 1-16 reads with 2-63 switch drops:
//! 91-94.5% of the line rate with the machine 29-44% busy.) Only
//! loss a server reported teaches it: stalls on a busy host come from its CPU, not from the
//! buffer. It never goes under the bandwidth-delay product plus the target queue at the
//! port's rate, so on a fast path it cuts the queue, not the goodput; and it lapses, so a
//! path whose buffer grew is probed again. This is the `inflight_hi` of BBRv2, with Cubic's
//! multiplicative step.
//!
//! Measured (docs/measurements.md, *Spot check of 2026-11-24, third session*; one run each):
//! on the 32 KiB port, 64 and 1024 senders, 18 configurations, switch drops 18,225 before and
//! 4,120 after, kernel RTOs 10 and 1, goodput 95.9-99.5% of the line rate before and
//! 93.9-99.3% after (the CPU-bound 1 KiB rows apart). **It costs the reads beside bulk
//! flows**: 0.34-0.49 of the line rate in two runs of 8 rows, where they had 0.38-0.74
//! before, and a version that also lowered the ceiling on a loss somewhat under it held the
//! budget at 16 KiB there and fell to 0.07-0.09 in one run. The reads' rate cannot tell the
//! port's queue from a neighbour's without the port rate ([`ReceiverConfigBuilder::port_rate_bps`]).
//!
//! With the 100 ms hold (docs/measurements.md, *Rerun of 2026-11-24, fourth session*): 60 of
//! 66 configurations of 8-1024 senders at 95% of the line rate or more (52 with the 10 s
//! hold, the same day), kernel RTOs in 2 (1), switch drops 3,515 (11,872); on a 16 KiB
//! port 0 and 1 kernel RTOs over 12 rows in two runs (20-45 in five runs before); beside
//! bulk flows 0.34-0.45 of the line rate, still with an occasional RTO.
//! (The RTO counts above are those the servers reported in `End` frames, which missed the
//! RTOs of connections the client abandoned after a hedge; since 2026-11-25 the client
//! resets such connections, a read may hedge up to [`READ_HEDGE_SHARE`] of the port's hedge
//! burst, and the bench also counts the server hosts' own RTOs: 0 over the same 66
//! configurations and 0 on the 16 KiB port; beside bulk flows 0.35-0.55 of the line rate,
//! with 3, 0 and 0 RTOs in three runs. See docs/measurements.md, *Rerun of 2026-11-25*.)
//!
//! **Losses at the ceiling** (sixtieth session). Until then each loss at the ceiling
//! lowered it again, so that it would settle under the edge in a few losses. But a cut
//! leaves the budget at the ceiling it set, and the losses reported in the milliseconds
//! after it are mostly the same overflow's: a response reports its loss in its `End`,
//! after the repair, and a retransmit that leaves while the connection's next response is
//! going counts in that one's. Each such report counted as a new loss at the ceiling and
//! cut 15% more: in a debug trace of 1024 servers of 32 KiB fragments behind the testbed's
//! 32 KiB port, the budget went from 45 KiB to the 16 KiB floor in 33 ms, a cut every 2-7
//! ms, at budgets (16-28 KiB) that cannot overflow that port on their own. Measured against
//! the old rule (docs/measurements.md, *Sixtieth session*; alternated rounds, no kernel RTO
//! in either): rows of 16-32 KiB fragments from 64-1024 servers, 1 and 16 reads, 0.98-1.06x
//! over four rounds (geometric mean 1.01x; 1.00-1.13x in an earlier run of three, but for
//! one row at 0.76x there), the budget's low 21-32 KiB instead of the floor, 1.3-2 times the
//! switch drops; behind a 16 KiB port, without NIC shapers, beside 2 bulk flows, at 100 and
//! 500 Mbit/s 0.98-1.01x with up to twice the drops.
//!
//! **Only while the reads fill the port.** Without a rate hint the port's rate is the
//! largest the reads measured lately, and beside bulk flows they measure most of it now and
//! then, so the queue counts as theirs (over [`OWN_QUEUE_SHARE`]) and every loss lowered
//! the ceiling, down to one bandwidth-delay product. The reads' rate at their reported
//! losses tells the two cases apart (docs/measurements.md, *Tenth session*; its share of the
//! port's rate at each loss, median and share of losses at 0.8 or more): the reads' own
//! overflow on 16 KiB ports at 1 and 2 Gbit/s and at 64-1024 senders, 0.93-0.95 and 93-99%;
//! beside 2 bulk flows at 1 and 2 Gbit/s, 0.68-0.72 and 13-33%. So a loss teaches a
//! ceiling only while the reads take [`CEILING_RATE_SHARE`] of the port's rate, and a loss
//! while the queue counts as theirs but they take less ends the ceiling in force. Measured
//! beside 2 bulk flows (four runs of 8 rows against two before): at 2 Gbit/s the reads got a
//! mean 37-40% of the line rate with 1-3 rows under 1/3, where they had 29-36% with 5-8; at
//! 1 Gbit/s 40-50% where they had 40-42%; on the 16 KiB and 32 KiB ports without bulk flows
//! the goodput and the drops stayed within the noise of two runs each.
//!
//! # The start
//!
//! [`ReceiverConfig::for_port`] starts B at [`crate::model::recommend`]'s budget for the
//! port's rate and buffer; without a hint, at [`DEFAULT_INITIAL_BUDGET`], the floor, and
//! slow start (see *Growth*) doubles it every round trip until a severe delay or a loss
//! ends that. Without a hint nothing says how much the port holds, and the first grants go
//! out before any sample: the 64 KiB that served one read per 1 Gbit/s port here overflowed
//! a 10 Mbit/s port, which holds 48 KiB with its token bucket. Its first reads lost their
//! tails and waited for their servers' RTOs: 18 and 23 host RTOs per 4 rows (16 and 64
//! senders of 4 KiB, 1 and 4 reads), all in the warm-up, and 183-201 switch drops; started
//! at 16 KiB, 0 and 0 RTOs and 10-14 drops in two runs each, the same goodput (97.5%). The
//! floor costs a fast path two round trips once per client: at 1 Gbit/s (18 rows), behind
//! 2 bulk flows and on loopback the runs stayed within their noise (docs/measurements.md,
//! *Thirtieth session*).
//!
//! A budget that starts at the floor meets the near-floor test of *A deep queue of other
//! traffic* at once, before any decrease, and a loaded host's late first bytes (16 reads
//! of 4 KiB fragments starting on 2 cores) then started competing: in two runs of
//! must-show 1 with the floor start, rows of 4 KiB fragments at 16 reads competed, held
//! budgets of 159-504 KB and read 0.857-0.922 of the line rate (14 and 17 rows of 24 at 95%
//! or more). So slow start does not count as near the floor: a budget that started there has
//! not been pushed there by a queue. With that, one run: 18 of 24, those rows at 0.977.
//! It costs more where the servers take long to answer, since a
//! round trip is then their time: a client's first read of 4 x 48 KiB from servers that
//! answer after 300 ms took 2.1 s on loopback, one grant per round trip at first, where a
//! 64 KiB start sent four grants at once. A client that knows its port gives the hint
//! (`for_port`); one that knows its servers are slow can start higher
//! ([`ReceiverConfigBuilder::initial_budget`]).
//!
//! # A deep queue of other traffic
//!
//! Beside bulk TCP flows through a port whose buffer is deeper than the reads' own queue
//! (64-128 KiB at 1 Gbit/s, or 32 KiB at 500 Mbit/s), the buffer stays full of the flows'
//! bytes and every grant's round trip waits out their queue: first-byte times of
//! milliseconds. Two things then held the reads to a few percent of the line rate
//! (docs/measurements.md, *Thirteenth session*). Without a rate hint the reads' own rate is
//! the port's as far as they know, so the flows' queue counted as theirs: its delay held
//! growth and shrank the budget to its floor within 35 ms of the first read, and it stayed
//! there (128 KiB port: 0.00-0.03 of the line rate, two reads past their 30 s deadline;
//! `naive` 0.09-0.74). With the hint the queue counted as another's, but growth stopped at
//! twice the bandwidth-delay product of the *base* RTT, a small part of a round trip that
//! holds milliseconds of queue (0.15-0.26).
//!
//! A flow cannot tell a slow port filled by its own bytes from a fast port filled by
//! another's from its rate and delay alone: its rate is its bytes outstanding over the
//! round trip either way (Little's law; a test built on it was tried and gained nothing).
//! The budget settles it: the receiver's own bytes cannot hold a queue longer than its
//! budget takes to drain. So when [`COMPETE_SAMPLES`] first-byte delays in a row exceed
//! [`COMPETE_DELAY_FACTOR`] targets, each taken either with the budget near its floor (at
//! most [`COMPETE_FLOOR_FACTOR`] times [`ReceiverConfigBuilder::min_budget`], once a
//! decrease has ended slow start: see *The start*) or, while the
//! reads take under [`OWN_QUEUE_SHARE`] of the port's rate, longer than the whole budget
//! takes to drain at that rate plus those targets, the queue is another's and the receiver
//! *competes* (Copa's competitive mode, entered on Copa's own sign: a queue that does not
//! drain). Competing:
//!
//! - the queue counts as another's whatever the reads' rate: no delay holds, no delay
//!   decreases, no learnt target or ceiling; loss still shrinks the budget as above;
//! - growth may pass the cap of its own queue, up to one smoothed RTT at the port's rate
//!   (the hint, else the largest rate measured lately): the bandwidth-delay product of the
//!   round trip its grants do see, the standing queue included. Not twice that: measured
//!   beside 2 bulk flows, twice (or no cap at all) gave the reads 50-70% of the line rate,
//!   took the bulk flows down to 110-250 Mbit/s and cost 5-13 host RTOs per 8 rows, where
//!   one round trip cost 2-3 (docs/measurements.md, *Fourteenth session*).
//!
//! [`COMPETE_SAMPLES`] samples in a row at or under the threshold (the queue drained) end
//! it. Where the reads' own queue is the only one the budget seldom sits near its floor
//! with such delays (docs/measurements.md, *Fourteenth session*): on the testbed without
//! bulk flows it competed in 6 rows of the issue's 60-row 1 Gbit/s matrix (256-1024
//! senders, mostly 16 reads at once: the 2-core host's scheduling delays first bytes), in
//! 1 row of 18 of another sweep and in 1 of 12 on a 16 KiB port, with no loss of goodput
//! and no host RTO, and never at 2 or 10 Gbit/s nor on loopback. Beside
//! bulk flows on the default 32 KiB port (where the reads already got 0.42-0.55 of the
//! line rate) it competed in 2-3 rows of 8 and changed nothing measurable; on 64 and
//! 128 KiB ports it competed in every row, and the reads' share went from 0.00-0.26 of the
//! line rate to means of 42-55% in four runs, some rows still at 0.14-0.19 (see
//! docs/measurements.md, *Where it lost, session by session*).
//!
//! **Why not only near the floor.** The floor stands for the smallest budget, but the
//! argument holds for any budget. Beside 2 bulk flows through a 64 KiB port, two rows at
//! 0.14 and 0.16 of the line rate kept budgets of 23.5-51.7 KB, over twice the floor,
//! with first-byte delays of 2.3 ms on average where the port alone queues 524 us: the
//! budget, capped at twice the bandwidth-delay product plus the target (57 KB at
//! 1 Gbit/s), never came near the floor, the receiver did not compete, and the reads got
//! that budget per round trip. Counting such samples too (docs/measurements.md,
//! *Nineteenth session*; one binary, alternated, 8 rows per run): means of 51.9 and 52.2%
//! of the line rate with every row at 1/3 or more, against 36.3-46.5% with 2-4 rows under
//! 1/3 in five runs of the floor alone. Only while the reads take under [`OWN_QUEUE_SHARE`] of the port: without that
//! condition, 16 reads of 1024 x 4 KiB without bulk flows (the 2-core host's scheduling
//! delays their first bytes by milliseconds) competed, their budget grew to 453 KB on its
//! own delays and the row read 0.95 of the line rate against 0.97.
//!
//! # A slow port is not a deep queue
//!
//! The floor's rule assumes that the reads' own queue near the floor is short: 16 KiB
//! queue 131 us at 1 Gbit/s, under the threshold of two targets (400 us). At 100 Mbit/s
//! the same 16 KiB queue 1.3 ms, and every sample near the floor passes the threshold with
//! no other traffic at all. Measured without bulk flows (docs/measurements.md,
//! *Twenty-eighth session*; 100 Mbit/s, 32 KiB port, 16-256 senders of 4 and 32 KiB, 1 and 4
//! reads): the receiver competed in every row, its budget grew to one smoothed RTT (its
//! own queue) at the port's rate, which it measured too high from the port's bursts (15-19
//! MB/s for 12.5), up to 84 KB, over the buffer and the port's bucket together; rows lost
//! hundreds of packets per second and read 0.70-0.97 of the line rate (0.72 and 0.77 for
//! one read at a time of 64 x 4 KiB in two runs). Competing did not end either: that needs
//! samples under two targets, which a 1.3 ms queue never gives.
//!
//! Rate and delay cannot tell the two apart (see above); the empty port can. The first
//! first byte after a grant issued while none of the receiver's bytes are outstanding
//! crosses the port with nothing of the receiver's ahead of it, so its delay is the queue
//! of other traffic alone (measured, one read at a time: at 100 Mbit/s without bulk flows
//! a median of 143 us against 1,655 us for the other samples; beside 2 bulk flows through a
//! 128 KiB port at 1 Gbit/s, 775 us against 1,375 us). So where the floor's own queue
//! alone takes [`SLOW_PORT_MARGIN`] times the threshold at the port's rate (a 16 KiB floor
//! under about 164 Mbit/s), and the median of the last [`EMPTY_PORT_SAMPLES`] such delays
//! (at least two, the newest within [`BASE_RTT_WINDOW`]) is at or under the threshold, the
//! receiver does not compete, and stops if it does. Reads that never leave the port empty
//! (many at once) give no such samples; for them nothing changes.
//!
//! Measured (docs/measurements.md, *Twenty-eighth session*; `default` alone, one run each,
//! against the build before): the rows above read 0.94-0.99 of the line rate (97.2%)
//! against 0.70-0.97 (90.9%) and 0.76-0.97 (92.1%). Beside 2 bulk flows at 100 Mbit/s
//! 44.8% (0 host RTOs) against 41.6% and 42.5%. The margin keeps the rule off faster
//! ports, where the starved reads of a port full of bulk flows measure a slow one: with a
//! margin of 1 (a 16 KiB floor under 330 Mbit/s), beside bulk flows at 500 Mbit/s the
//! reads got 52.3% and 49.0% against 53.4-58.0% in five runs of the build before that day;
//! with 2, 53.5% and 52.9%. Behind a 128 KiB port at 1 Gbit/s (the starved reads measured a port of
//! 19-97 MB/s) a version with a margin of 1 that needed all of the last five within the
//! threshold read 52.4% and 53.8% against 54.6% and 55.6%.
//!
//! # Stalls are judged against expected completion
//!
//! A grant issued behind bytes the receiver itself granted waits for them at the port's
//! rate; it is not stalled. Each grant carries the time the bytes outstanding on the port
//! at its issue take to arrive at the port's measured rate, and its RTO counts from then
//! (see `Gate::ahead` in the scheduler).
//!
//! # Stalls on a lossy port
//!
//! A grant whose read has spent its hedge budget (and the port's bucket) waits, and moves
//! to a replica or a new connection only after [`crate::scheduler::ESCALATE_AFTER_STALLS`]
//! backed-off stalls: 300-500 ms with a few milliseconds of queue in the RTO estimate.
//! Beside bulk flows, where every response risks a lost tail that only the server's RTO
//! repairs, the servers' 200 ms RTO fired first: traced with the kernel's tracepoints, the
//! reads' host RTOs were on such grants, and one read took 625 ms (docs/measurements.md,
//! *Fifteenth session*). So while a server has reported loss within
//! [`LOSSY_PORT_WINDOW`], such a grant also moves once it has gone without progress for
//! [`crate::scheduler::ESCALATE_WITHIN_RTTS`] (8) smoothed first-byte times, at least
//! [`crate::scheduler::MIN_ESCALATE_WITHIN`] (20 ms) and at most
//! [`crate::scheduler::ESCALATE_WITHIN`] (100 ms): after the server's tail-loss probe had
//! its chance (about two RTTs plus 8 ms at HZ 250), before its 200 ms RTO. Only then: a
//! grant on a port without loss may be waiting for a slow server, and one moved every few
//! round trips would never complete on a server that takes longer to answer. And at most
//! [`crate::scheduler::MAX_TIMED_MOVES`] (3) times per range of a fragment until that range
//! makes progress again, for the same reason (per fragment until the thirty-second
//! session, when a fragment's several ranges used up one count between them). Measured
//! beside 2 bulk flows (three alternated runs each of 8 rows, before the two limits): 1
//! host RTO against 14. The limit was once per fragment
//! until the twentieth session: a grant moved lands on a new connection through the same
//! lossy port and can lose its own tail, and it then waited for the stall count while its
//! server's RTO fired (docs/measurements.md, *Twentieth session*). The bound was a fixed
//! 100 ms until the twenty-first session; a read of 24 ms then waited 100 ms for each such
//! fragment, and at 500 Mbit/s beside 2 bulk flows the bound of 8 round trips took the
//! reads from 36.1-36.7% of the line rate to 42.6-44.7% in alternated runs (see
//! [`crate::scheduler::ESCALATE_WITHIN_RTTS`]).
//!
//! A grant moved (or hedged) is cancelled, and the transport resets its connection once
//! that owes only cancelled responses and has been silent for a while on a lossy port
//! ([`Receiver::is_lossy`]; `incast-rpc` waits 150 ms): before the server's RTO fires on the
//! unwanted bytes.
//!
//! # Stalls count where loss is reported
//!
//! A stall is counted as a response that saw loss only in slow start (the budget has not
//! met the port yet, and the stall may be the first overflow's lost tail) or while the port
//! is lossy ([`Receiver::is_lossy`]: a server reported loss within [`LOSSY_PORT_WINDOW`]);
//! on a quiet port past slow start it is hedged or backed off as before but leaves the
//! budget alone ([`ReceiverStats::quiet_stalls`]). Where a buffer overflows, some of the
//! flows that lost recover by fast retransmit or a tail-loss probe, and their servers
//! report it in `End` within a round trip or two, before the stall timers of the flows that
//! lost their tails fire; where nothing is reported, a first byte late past its expected
//! completion is the host's (a descheduled server or client on 2 cores, a slow disk), and a
//! smaller budget does not make it sooner. Counted as loss, such stalls shrank the budget
//! on loopback, where nothing is ever lost, by 4-33 decreases per 4-second cell, in one run
//! under a 256 KiB fragment (1 server x 16 reads at 0.81 of `naive`, 1.45 grants per read),
//! and on the testbed in rows of 4 KiB fragments with no switch drop and no retransmit
//! (13-61 per row of must-show 1, the rows that fell under 95%).
//!
//! Measured in alternated runs, one each (docs/measurements.md, *Thirty-fourth session*):
//! must-show 1 (24 rows) 21 rows at 95% of the line rate or more against 18, every row of
//! 4 KiB fragments up by 0.7-4.1 points; the 1 Gbit/s grid of 18 rows 97.3% against
//! 96.6%, 17 rows at 95% against 13; 200 Mbit/s behind an 8 KiB port and 100 Mbit/s beside
//! bulk flows the same (the port is lossy there); loopback 0.92-1.08 and 0.85-1.11 of
//! `naive` against 0.80-1.78, 0.87-1.14 and 0.79-1.22 for the build before, and no cell's
//! budget under its fragment (in four more runs 0.54-1.62, the host's swings; see the
//! measurements). Without the slow start exception a first version had 6 host RTOs in
//! one warm-up at 200 Mbit/s behind 8 KiB, where the builds before had none.
//!
//! # Spreading a small budget on a lossy port
//!
//! Beside bulk flows the servers' connections lose often, and every loss cuts the server's
//! congestion window. Traced with `ss` on the testbed (100 Mbit/s, 2 cubic bulk flows, 16 x
//! 32 KiB, one read at a time), the servers' sockets had windows of 2-12 segments and
//! slow-start thresholds of 2-4, and about 7% of the segments they sent were
//! retransmissions; the bulk flows' had 5-13 and 4%. The budget then buys less than it
//! says: the receiver's trace showed it (16-20 KB) always fully outstanding, in two grants
//! of half the budget on one fragment's connection (a started fragment takes its next
//! grant before an untouched one starts), and that connection delivered a segment every
//! 1-2 ms, a window of a few segments per round trip of about 2.5 ms. The reads got 18-25%
//! of the line rate, every row of 8 under 1/3, in every run of the earlier sessions.
//!
//! So while a server has reported loss within [`LOSSY_PORT_WINDOW`] and the queue is not the
//! receiver's own (**Whose queue** under *The control law*), a budget under
//! [`SPREAD_GRANTS_PER_BUDGET`] policy chunks is spent in chunks of a quarter of it (at least
//! [`MIN_CHUNK`]), and a read starts its untouched fragments, one grant each on a connection
//! of its own, before it pipelines more on started ones (while the port takes new senders).
//! The same bytes outstanding then ride on four windows instead of one. Each half alone
//! does little (100 Mbit/s beside 2 bulk flows: spreading alone 27% of the line rate,
//! quarter chunks alone 23%, both 41-43%, nothing 21-23%). Not on a quiet port, and not with
//! a budget of four policy chunks or more: there a connection's window carries its
//! pipelined chunks, and more, smaller grants only cost requests.
//!
//! Nor where the reads have the port to themselves: their losses there are their own
//! overflow, which the budget answers, and the servers' windows are not cut by other
//! flows. Until the thirty-second session a single reported loss turned spreading on
//! there for a second, and the reads alone at 1 Gbit/s (a handful of drops per second at
//! 32 KiB-256 KiB fragments) made 2.5-3.3 times the grants per block, at 10-20% more CPU
//! per GiB. Side by side in alternated runs (docs/measurements.md, *Thirty-second
//! session*): 18 rows of 16-256 senders x 4-256 KiB x 1 and 4 reads 96.3% of the line rate
//! with spreading there against 97.4% without (16 and 14 rows at 95% or more); a 3 Gbit/s
//! port with a 64 KiB buffer, where the 2-core host is the limit, 97.8% against 99.7%
//! (48 x 32 KiB x 1: 92.3% against 98.4%); 100 Mbit/s 97.5% against 97.8%; beside 2 bulk
//! flows, where the queue is not the reads', 55.5% against 56.2% (the noise).
//!
//! Measured beside 2 cubic bulk flows (docs/measurements.md, *Twenty-second session*; 8
//! rows of 16 and 64 senders, SRU 32 and 256 KiB, 1 and 4 reads, `naive` side by side):
//! 100 Mbit/s 0.38-0.47 of the line rate (mean 42.4%), every row at 1/3 or more, where
//! every row had been under it in every earlier run; 500 Mbit/s 0.42-0.66 (56.3%), every
//! row at 1/3 or more, where 2-4 rows had been under. At 1 Gbit/s the mean did not move
//! (47.7%, 50.1% and 51.9% in three runs, against 49.6% and 49.3% with the rule switched
//! off in alternated runs), but one read at a time of 32 KiB fragments fell to 0.32-0.33 in
//! 3 rows of 24, and to 0.31-0.32 beside `bbr` bulk flows and behind a 128 KiB port (a read
//! or two of 210 ms among 30; a response that ends with one segment in flight gets no
//! quick loss probe from Linux, but that is not traced).
//!
//! **What it costs: SYN-ACK timeouts.** More, smaller responses stall more often on such
//! windows; the client resets a stalled connection (see *Stalls on a lossy port*), and
//! the next grant to that server opens a new connection, whose SYN-ACK crosses the full
//! port. A server's kernel counts the handshake timer of a lost SYN-ACK (1 s) as an RTO: 1,
//! 1 and 4 host RTOs per 8 rows at 1 Gbit/s, all with a SYN-ACK sent again, against 0 and 0
//! (connections reset: about 2,700 per run against 650); 10 at 500 Mbit/s (6 handshakes at
//! most) and 17 at 100 Mbit/s (10 at most). The grant waiting on such a connection is
//! hedged or moved within the port's bounds. Counted on the server hosts in the
//! twenty-third session (1 Gbit/s, 8 rows per run): every SYN-ACK sent again was answered
//! by a reset (`EmbryonicRsts`): the client had already dropped that connection when the
//! timer fired, so no read waited out the second; the hosts accepted about 8,000 connections per
//! run with the rule and 2,900 without, and 5 and 0 of those lost their SYN-ACK. Not
//! resetting after a won hedge halved the connections (3,850; the rest are mostly those a
//! finished read drops while they still owe a cancelled response) but left 2-4 lost
//! SYN-ACKs per run; a floor of [`GRANT_TIME`] at the port's rate under the quarter-budget
//! chunk left 2-6 (docs/measurements.md, *Twenty-third session*).
//! Tried against it and not kept (same A/B form, 1 Gbit/s beside 2 bulk flows, 8 rows per
//! run): a `Probe` frame the server sent in answer to a `Cancel` of a response it had
//! already written whole, new bytes behind a lost tail, so that its TCP learns of the loss
//! from the client's SACK within a round trip instead of from its RTO. The stalled
//! connections then healed and fewer were reset (about 2,200 resets per run against
//! 4,100-4,700), and the hosts sent 0-1 SYN-ACKs again per run against 3-8; but the reads
//! got 46.4% and 46.5% of the line rate against 49.2-51.3%, one row at 0.31. Leaving out
//! the reset on a won hedge as well: about 200 resets, 0 SYN-ACKs again, 46.1-47.7%; and
//! at 100 Mbit/s 11 host RTOs of which at most 4 handshakes, against 16. Without the probe,
//! leaving out that reset cut the resets to 477 but not the SYN-ACKs (3).
//!
//! Since the twenty-fourth session the client leaves a won hedge's original alone under
//! the port (most such originals were slow, not stalled, and end by themselves; the quiet
//! reset still ends those that wait out a lost tail): in four more alternated pairs at 1
//! Gbit/s, 3,576-3,662 connections and 1-4 lost SYN-ACKs per run against 6,971-7,513 and
//! 3-9, the same share of the link; the four final runs had 0, 2, 3 and 1
//! (docs/measurements.md, *Twenty-fourth session*).
//!
//! # Late grants leave the budget
//!
//! Beside bulk flows that keep the port's buffer full, a response often loses its first
//! packets or its tail, and the server's TCP repairs that with a tail loss probe 8-12 ms
//! later (two smoothed RTTs plus two jiffies at HZ 250) or with its 200 ms RTO. Meanwhile
//! the grant still counts against the budget. Beside bulk flows the budget sits at a few
//! grants, so a read moves through its fragments one or two at a time, and one grant without
//! a byte holds it whole: in a trace at 500 Mbit/s (one read of 16 x 32 KiB at a time, taken
//! before the testbed fix of docs/measurements.md, *Sixteenth session*) a read granted
//! nothing for 77 ms while one grant waited for its first byte. TCP does not count
//! segments it deems lost in its pipe (RFC 6675; RACK-TLP, RFC 8985, deems them lost by
//! time); the receiver should not count such grants either.
//!
//! So, while the queue is not the receiver's own (its reads take under [`OWN_QUEUE_SHARE`] of
//! the port, or it competes with a standing queue), a grant without progress for
//! [`LATE_AFTER_RTTS`] smoothed first-byte times (at least [`MIN_LATE_AFTER`]) past its
//! expected arrival is *late*: its remaining bytes stop counting against the budget, and the
//! reads grant on. Its stall timer still runs, so it is hedged or moved as before, and bytes
//! that make progress count again. At most a budget's worth of late bytes is discounted, so
//! the bytes outstanding stay under twice the budget even if every late grant was only
//! queued. While the queue is the receiver's own, a late grant is its own overcommit, and
//! nothing is discounted.
//!
//! A late grant's first byte measured the loss's repair, not the path: it enters the RTT
//! estimate and the queueing-delay signal clamped to the moment the grant went late (Karn's
//! algorithm drops such samples; clamped, a path that got slower for good still raises the
//! estimate, by up to the late bound per sample). In the same trace a few 8 ms samples among
//! 1 ms ones had inflated the grant timeouts to 10-15 ms, and with the multiplier that
//! spurious hedges raise, a stalled grant waited up to 100 ms for its hedge.
//!
//! Measured beside 2 bulk flows (two alternated runs of 8 rows each, with and without):
//! 1 Gbit/s 51.7 and 48.8% of the line rate against 46.9 and 48.2%, 500 Mbit/s 31.5 and
//! 36.8% against 33.7 and 30.8%, but 11 host RTOs against 5 there; a 128 KiB port 41.5%
//! against 35.7% in one run (docs/measurements.md, *Sixteenth session*).
//!
//! # A silent server
//!
//! A server that freezes (a stopped process, a dead host whose connection has not reset)
//! leaves its grants outstanding, its stalls (in slow start or on a lossy port) shrink the
//! budget below what those grants hold, and every other read of the port then waited behind
//! them until the frozen read's deadline (measured: a healthy 1 MiB read waited the whole
//! 20 s deadline of a read on a frozen loopback server;
//! `loopback::a_read_on_a_frozen_server_does_not_starve_the_clients_other_reads`).
//!
//! The rule: when the *port* has seen no byte and issued no grant of new bytes for
//! [`PORT_SILENCE`] (250 ms) while bytes are outstanding, every outstanding grant stops
//! counting against the budget (it is *stuck*) until a byte of that grant arrives; the
//! stalls of a stuck grant no longer shrink the budget either. The same test now reads in
//! 3 ms. A hedge or retry of a stuck grant's range is stuck from its issue, and so is a
//! grant of new bytes of a fragment that has a stuck grant: a server that has sent nothing
//! since the port went silent will not send sooner because it is asked again.
//!
//! Why each grant and not each read: until 2026-11-28 a read's first byte made all its
//! stuck bytes count again. A read whose one server withheld its answers (no replica) then
//! got grants for its other fragments once the rule fired, their first byte made the
//! withheld grants count again, the budget (shrunk by their stalls) was full, and the port
//! went silent again: the read and every other read of the port went on in steps of
//! [`PORT_SILENCE`]. In `sim`, with one server of 8 x 256 KiB answering each request a
//! second late, a second read of 16 x 64 KiB took 3.8 s at 1 Gbit/s (7 discounts); now
//! 273 ms (one), and the slow read's 7 other fragments arrive within the first discount
//! (`a_slow_server_holds_back_its_read_not_the_port`,
//! `a_silent_server_does_not_hold_back_its_reads_other_fragments`).
//!
//! Why the whole port is judged and not a read: three rules that judged each read
//! were tried on 2026-11-23 and lost on the testbed, because a read is often silent for a
//! good reason (its grants queue behind other reads' on shared connections, or wait out
//! incast loss):
//! after two stalls without a confirmed byte, busy reads of 256-1024 servers were marked
//! stuck and the port overflowed (SRU 256 KiB, one read: 96% of the line rate fell to
//! 71-90%, with kernel RTOs); after 250 ms without a byte, 16 concurrent reads fell from
//! 95-97% to 50-56% with 535-1,833 kernel RTOs; after 8 smoothed RTTs (at least 20 ms), a
//! bulk flow in `sim` starved the reads into being stuck and the budget collapsed. A port
//! that receives nothing at all for 250 ms is not congested: even a kernel RTO (200 ms)
//! and its retransmission fit within it, and the rule never fired in a testbed sweep of
//! 64-1024 senders at 1 and 16 concurrent reads (2026-11-24). What it costs: once it fires,
//! a silent server that wakes up sends its stuck bytes on top of the budget (at most its
//! fragments' pipelines of grants). A port that goes silent while other reads still have
//! room is not affected: grants of new bytes are signs of life.
//!
//! # A slow store is not a stall
//!
//! A server whose store takes `H` to answer (a disk, an object store under load) sends
//! nothing for `H`, which the stall timers, sized on the path's round trip, read as a lost
//! tail: the grant is hedged, then moved, and each of those cancels the request and starts
//! the server's wait again. On loopback with every request held 800 ms, reads of 4 and 16
//! servers failed at their 10 s deadline where `naive` took 802 ms (see the scheduler's
//! *moves back off*).
//!
//! The rule: the servers report their hold (incast-rpc's `Data` frames; from the request's
//! arrival, or from the end of the response ahead of it on the connection, so a request
//! queued behind another is not charged the other's time), and the receiver keeps, per
//! server, the hold of its latest first bytes of a grant issued on an idle connection
//! ([`MAX_LEARNT_HOLDS`] servers): a lower hold replaces it at once, a higher one moves it
//! half-way. (Queued grants are left out: a server that read one ahead held it for nothing
//! past the response before it; learnt from every first byte, such holds replaced the
//! store's and the rule was off most of the time. The cost: a server whose connection is
//! never idle is never learnt, see `sim`'s `a_server_that_answers_every_request_late_is_answered`.)
//! A grant to that server is not
//! expected before its issue plus that hold: its stalls and lateness count from there, as
//! they count from the bytes ahead of it on the port. A grant to a server not learnt yet is
//! expected as the port's servers answered lately (the same rule over every server's
//! samples, so the lowest of them leads): where every store was slow, each new server's
//! first grant stalled at the path's timer, and in slow start those stalls counted as loss
//! and ended it. Stalls of grants to slow stores ([`ReceiverStats::store_stalls`]) are
//! hedged and backed off as any, but never count as loss: a store's jitter, not the port's
//! buffer. Nor do they come at the path's timeout: a hedge asks the store again and waits
//! its hold again, so such a grant waits at least the lesser of that hold and
//! [`crate::scheduler::STORE_STALL_WAIT`] without progress, time for its server's kernel
//! to repair a lost tail (see the scheduler's *A re-request waits in the store again*).
//! A hold longer than the transport carries ([`HostTime::server_capped`]) is learnt from
//! the grant's own first-byte time, and such a sample teaches nothing about the path's
//! queue (a store's jitter read as a queue held the budget at every sample).
//!
//! **A hold past the transport's cap.** Such a sample was kept out of the path's round trip
//! too, so the smoothed round trip that sizes the port's rate samples
//! (`Receiver::rate_rtt`) stayed the whole first-byte time, a 100 ms store in it: every
//! busy period after a hold was shorter than what a sample skips, none was sampled, and the
//! port was known only by its delivery rate averaged over the holds (on loopback 0.06-2.6
//! Gbit/s where `naive` read 0.08-4.5). The credit that lets held bytes out fills at that
//! rate, so a read of 16-64 servers took two holds where `naive` took one. incast-rpc's
//! `StoreTime` frame carries the store's part in full (32-bit microseconds), so where that
//! part covers the cap the sample less it is the path's round trip (with the host's own time
//! past its store's, microseconds unless the host is loaded), taken for the round trip
//! that sizes the rate samples and for nothing else: the delay rules still leave the sample
//! out. With 100 ms stores (incast-bench, two alternated runs each) the 1 Gbit/s testbed's
//! eight rows of 16-64 servers, 32-256 KiB fragments and 1-4 reads read 1.17-2.29x of the
//! old rule's goodput (0.77x of `naive`'s to 1.21x by geometric mean; the switch dropped
//! 1.3-4.8 times as much in six rows and less in two, with no kernel RTO), loopback's six
//! rows 1.10-2.03x (0.63x of `naive` to 0.90x; one read of 4-64 servers 0.99x), and four
//! rows at 10 Gbit/s 1.29-2.24x (one run). What it costs: the credit now fills at the
//! port's real rate, so more held bytes come back together, and behind a 100 Mbit/s port
//! with 50 ms stores one read at a time of 8 x 64 KiB read 0.76x of the old rule's goodput
//! (three rounds; 2.6 times the drops, 81 hedges where there were none; the rows of 32
//! servers or 4 reads 1.00-1.13x). Fed to the delay rules as well, the stores' answers,
//! which come together, read as a queue: with 64 servers the budget sat at 83-98 KB and
//! loopback read 0.74x of `naive` (docs/measurements.md, *Sixty-seventh session*).
//!
//! **The store's part of a hold.** A server's hold is its store's time and its host's: its
//! CPU, and its queue of other requests. Only the store's time says the server will hold
//! the next request as long whatever the port does; the host's grows with the requests
//! the port puts out, and the rules below put more out for a hold. Learnt whole, a loaded
//! host's time fed on itself: on the 2-core testbed behind an 8 KiB port (64 servers of
//! 64 KiB fragments, 8 reads at once, stores in memory), in 3 of 11 runs one strategy's
//! first slow answers set the port's hold past [`STORE_HOLD`], the grants it then held let
//! more out, and the servers' mean hold stayed at 7.6-20.9 ms (the CPU of 64 servers
//! answering at once) through all three rounds: 2,579-3,627 grants a round were held, and
//! those rounds read 0.54-0.83 of the line rate, against 0.71-1.00 in the others. In the
//! 1 Gbit/s grid (32 KiB port) it held 51-3,015 grants in half the rows (docs/measurements.md,
//! *Fifty-third session*). So where the transport tells the store's part apart
//! ([`HostTime::store`]; incast-rpc's servers time their store's reads and send the part
//! in a `StoreTime` frame), only that part is learnt; the whole hold still leaves the
//! path's delay and stays in the growth cap (see *Host time is not the port's queue*).
//!
//! **Bytes in a store are not in the port.** A grant issued to a server whose learnt hold is
//! [`STORE_HOLD`] or more is *held* until its expected first byte (or its first byte, if
//! sooner; [`ReceiverStats::held`]). Held bytes do not count against the budget, as late ones
//! do not (*Late grants leave the budget*). The budget is for the port's queue, and a
//! store's bytes are not in it yet; counted, they held the port to a budget per hold
//! (Little's law): with a 1 ms store on the testbed, 16-64 servers read 0.24-0.50 of the
//! line rate at budgets of 44-390 KB, and 4 to 16 servers on loopback with a 100 ms store
//! 8-36 Mbit/s against `naive`'s 21-321.
//!
//! How many may leave it is a question of when they come back: a store releases what it
//! held a hold after the grants went out, so held bytes granted together arrive together.
//! They leave the budget as fast as the port passes bytes: a credit that fills at the
//! port's rate (the hint, else the largest measured), to at most the held bytes plus the
//! budget's room beside the late ones. Held bytes over the credit count. So a port that
//! keeps its stores busy has about its rate times their hold out in them, the bytes a store
//! releases in any round trip stay within a budget or two, and a port that idled may put
//! out at most one budget of held bytes beyond the budget at once. Until the port's rate
//! is known, at most a budget's worth of late and held bytes together leave it, as before.
//!
//! **On a lossy port, released bytes spend their credit.** The credit is a level the held
//! bytes stay under, so a store that released bytes (their first byte came, or their
//! expected time passed) gave their room back, and the grants to stores went out at the
//! port's rate *plus* the rate the stores released: one port's rate more every hold. Traced
//! on the testbed at 100 Mbit/s with a 20 ms store (the servers' send times, 32 servers x
//! 64 KiB, 4 reads at once), the stores released 2-3.5 times the port's rate from the first
//! hold on; the switch dropped 3,600-4,300 packets a row, the servers took 30-58 kernel
//! RTOs, and stalls moved 420-600 grants to new connections. So while the port is lossy (a
//! server reported loss within [`LOSSY_PORT_WINDOW`]) the bytes a store releases spend
//! their credit ([`ReceiverStats::held_credit`]), and the stores' grants go out at the
//! port's rate. That row then read 0.92-0.97 of the line rate against 0.74-0.85 (three runs
//! of each), with 1,161-1,215 drops and no kernel RTO. Not on a port that lost nothing: its
//! rate is measured in bursts shorter than a hold, and on loopback with a 100 ms store
//! (measured at 8-141 Mbit/s) spending held the reads to 0.11-0.50x of `naive`'s goodput
//! against 0.45-1.00x (docs/measurements.md, *Forty-eighth session*).
//!
//! The first rule (a budget's worth at all times) needed a budget of the rate times half the
//! hold: with a 5 ms store on loopback, 4 reads of 64 servers read 0.08-0.26x of `naive`'s
//! goodput at budgets the delay and loss rules kept at 0.5-3 MB (docs/measurements.md,
//! *Forty-third session*).
//!
//! **Released bytes do not stop the next grants.** A store releases its grant's bytes a
//! hold after the grant went out, and from the first byte they count against the budget
//! again. With every store slow, the budget was then full of bytes the stores had released
//! together (which the port could not have paced), and the next grants waited for them: on
//! the testbed with a 20 ms store, 16 reads at once of 8 or 64 servers held 0.4-1.5 MB in
//! the stores, where the port's rate times the hold is 2.5 MB, and read 0.30-0.48 of the
//! line rate against `naive`'s 0.44-0.79. So where the port's servers hold their answers
//! ([`SPARE_CREDIT_HOLD`] or more lately) and its rate is known, a new grant may take,
//! beside the budget's room, the credit that held bytes do not use
//! ([`ReceiverStats::spare_credit`]). The stores' grants then go out as fast as the credit
//! fills (the port's rate), whatever the released bytes, whose time the stores set, not the
//! port. What it trades: there the
//! bytes the port carries are no longer bounded by the budget, and the switch drops more
//! (docs/measurements.md, *Forty-fourth session*). Elsewhere (no store holds, no rate
//! yet) nothing changes.
//!
//! **Spare credit is for grants the stores hold.** Whether the spare credit applies is the
//! port's hold (its servers' lately); whether a grant is held is its own server's. A grant
//! held by its store spends the spare credit by being held (the held bytes grow), but a
//! grant to a server that answers at once took the same room and spent nothing: the next
//! grant found the credit whole, and the next, while the budget's own room stayed shut.
//! One slow answer is enough to set the port's hold (a higher hold moves it half-way up):
//! traced on the testbed at 100 Mbit/s beside 2 bulk flows (64 x 32 KiB, 4 reads at once),
//! one first byte 24 ms after its request on a port whose servers answered in 15-115 us
//! lifted the port's hold from 74 us to 12 ms, and at that instant one read put out 124
//! grants of 4 KiB with a budget of 16 KiB (516 KB outstanding, none of it held). About
//! a hundred milliseconds on, its stalled fragments were hedged and moved together (30
//! hedges and 180 retries within 63 ms), and its servers took 8 kernel RTOs. So a grant of
//! new bytes that its store does not hold spends the spare credit it took past the
//! budget's room. Beside 2 bulk flows at 100 Mbit/s that row took no kernel RTO in five
//! runs against 0-6 a run (14 in five) before (docs/measurements.md, *Fiftieth session*).
//!
//! **The credit fills between events.** The credit grows with time, but a grant waiting on
//! it went out only at the receiver's next event (bytes, a timer). A port whose bytes all
//! wait in the stores has none until a store answers, so the grants the credit would have
//! let out waited a whole hold: on the testbed with a 20 ms store, a single read of 8
//! servers took 48 ms a block of 512 KiB where one hold and the transfer take 24, and
//! told the port's rate (`hinted`) it took as long. So the read the port holds back while
//! the credit can still grow is due again ([`Receiver::poll_timeout_of`]) once the credit
//! has grown by the largest chunk a grant may take, [`CREDIT_WAKE`] at the soonest (one
//! wake a millisecond at most, and only where the spare credit applies). The stores' grants
//! then go out as the credit fills, between the stores' answers too. On the testbed the
//! single-read rows of a 20 ms store read 0.300-0.318 of the line rate against 0.253-0.275
//! in four alternated runs; the rows of 16 reads, which had events enough, did not move
//! beyond the runs' spread (docs/measurements.md, *Forty-sixth session*). A read's own
//! chunks still each waited for the store (at most the policy's pipeline depth of them a
//! fragment, each a hold after the last), so a fragment whose grants all wait in its store
//! now takes up to [`crate::scheduler::STORE_DEPTH_FACTOR`] times that depth (the
//! scheduler's *Pipelining*). What that trades, on the testbed with a 5 ms store: a
//! fifth fewer switch drops and 0-2 kernel RTOs a grid where there were 3-20, but single
//! reads of 16 x 256 KiB at 0.42-0.48 of the line rate against 0.56-0.68: up to 12 grants
//! queued on a connection, and a stall of it hedged each of them, which spent the read's
//! hedge budget on one stall. Since the grants behind a hedged or moved grant go along
//! with it (the scheduler's *Stalls are per connection*), those reads read 0.66-0.73
//! (docs/measurements.md, *Forty-seventh session*).
//!
//! **Held answers are paced on a lossy port.** A store releases what it held when its own
//! clock says, not when the port can take it: the testbed's stores answer on a 1 ms timer
//! tick, so every answer granted within a millisecond leaves together, each at its host's
//! line rate, and a shallow buffer drops the overlap. Those answers are each a
//! connection's last bytes until the next hold ends, so a lost tail waits for a tail-loss
//! probe or the server's RTO. So where the rule above applies and a server reported loss
//! within [`LOSSY_PORT_WINDOW`], a grant to a slow store carries a pace: its bytes over
//! [`HELD_ANSWER_SPREAD`] of the hold (an eighth: the answer then takes at most that much
//! longer than at the line rate, within the time it waited anyway), times
//! [`PACING_GAIN`], at most that gain times the port's rate. Answers released together
//! then overlap at about the port's rate. On the
//! testbed with a 20 ms store the switch dropped 84,171 packets in a grid without it and
//! 39,241 with it, the servers took 52 kernel RTOs and 15, and the reads got 0.480 and
//! 0.505 of the line rate; with a 5 ms store 59,223 and 33,518 drops, 18 and 10 RTOs,
//! 0.610 and 0.645 (docs/measurements.md, *Forty-fifth session*). Not on a port that lost
//! nothing lately: on loopback (no loss, no shallow buffer) the same pace, always on, read
//! 0.67-0.82x of `naive` in 4 rows of 8 where the build without it read 0.82-1.11x.
//!
//! Nor over longer than the budget takes to drain at the port's rate. A paced answer counts
//! against the budget while it trickles in, and an eighth of a long hold can outlast the
//! whole budget at the port's rate: at 100 Mbit/s with a 20 ms store (held about 21 ms) an
//! eighth is 2.7 ms, where the budget at its 16 KiB floor, where losses keep it, drains in
//! 1.3 ms; at 10 Gbit/s with a 5 ms store (held 6-14 ms on the loaded testbed) a 256 KiB
//! answer took about 1 ms in a budget of 0.3-1.1 MB. The budget then held answers that
//! together carried less than the port.
//! Bounded so, the 100 Mbit/s grid with a 20 ms store read 0.844 of the line rate in two
//! runs against 0.781 and 0.798, and the 1 Gbit/s one 0.616 and 0.622 against 0.576 and
//! 0.577, for 35-45% more switch drops and no kernel RTO; with a 5 ms store the same
//! (docs/measurements.md, *Forty-ninth session*). What the pace still costs: paced answers
//! arrive at about the rate the credit of held bytes let their grants out, the port's
//! rate as known, so a port's rate measured under the pace cannot grow past it. At
//! 10 Gbit/s, where the 2-core testbed's retransmits now and then keep the port lossy,
//! the reads knew the port at a median 6.6-7.1 Gbit/s a run, against 8.2-9.0 without the
//! pace, and read 0.85-0.92x of `naive` against 0.97-1.02x without it. Credit filled
//! faster while paced (a probe of [`PACING_GAIN`], always or only while under 3% of the
//! last 64 responses saw loss) and a pace only where at least 3% did: each lost elsewhere
//! or gained nothing there.
//!
//! Servers waiting on their stores send nothing either: the servers whose grants are all
//! held leave the sender cap, however many. What bounds them is the credit above: held bytes
//! leave the budget only as fast as it fills at the port's rate, so grants to slow stores go
//! out at that pace and their answers come back spread the same way, not all at once. Only
//! up to the cap's worth of them used to leave it, and the cap counts each read's servers
//! apart (4 reads of the same 64 servers are 256 senders): with the cap at 64, 4 reads at
//! once of 64 servers x 256 KiB behind 100 ms stores had two reads' servers waiting at a
//! time, and the last two reads took a second hold. Simulated at 10 Gbit/s, the last read
//! ended 241 ms after they started, against 154 ms now, the ideal (the test
//! `many_reads_of_slow_stores_take_one_hold_together`); on loopback the row read 0.56x of
//! `naive` against 0.97x now (docs/measurements.md, *Sixty-eighth session*).
//!
//! **A sender its store holds is not sending yet.** The cap still counted the servers
//! whose stores had released their answers, and where every store is slow they are
//! released together: traced on the testbed with 100 ms stores (4 reads at once of 1,024
//! servers x 32 KiB), each wave of answers put 90-450 servers to sending at once, and until
//! fewer than the cap's 64 were left no new server had a grant, though the credit had room
//! to spare. The grants went into the stores in waves of about a hold and came out in
//! waves of about the transfer, and the port idled between: 408-497 Mbit/s where `naive`
//! read 642-819. A new sender's grant waits its store's hold before it sends a byte, so it
//! adds to the senders of a hold from now, not to those sending now. So where the spare
//! credit applies, a new sender passes the cap while the bytes sending now fit the budget
//! and drain, at the port's rate, within [`HELD_SENDER_SHARE`] of the port's hold: they
//! are done before it sends. Its bytes stay bounded by the credit, as every held sender's.
//! Not while they are over the budget (the port is behind): with only the drain's bound,
//! the grants of that row went out through the waves, 20-30 MB waited in the stores where
//! the port's rate times the hold is 12.5 MB, the 2-core testbed's stores (their tasks)
//! answered 150-250 ms late, and 1,824 hedges and 6,604 connection resets followed where
//! there had been about 200 of each. With both bounds, alternated with the build before
//! (docs/measurements.md, *Seventieth session*): 1.04x of its goodput by geometric mean
//! over 8 rows of 64-256 servers behind 20 ms stores, 1.02x behind 5 ms ones, 1.06x over 4
//! rows of 256-1,024 servers x 32 KiB behind 100 ms stores (five runs each, 1.04-1.11x by
//! row), and 1.02x on loopback with 100 ms stores. It does not end the waves where the
//! answers released together are more than the budget: 4 reads of 1,024 servers read 1.04x
//! of the build before, still 0.62x of `naive`, with about 1.5-2 times the hedges.
//!
//! **A port waiting on stores is not busy.** The port's rate (see *The port's rate*) is
//! sampled over busy time, and a port whose bytes all waited in slow stores counted those
//! waits: with a 1 ms store the testbed's 1 Gbit/s port read as 0.39-0.74 Gbit/s, and the
//! growth cap (the rate times the served round trip) held the budget to it. The port is busy
//! only while bytes are outstanding that are not held. The samples' length and the part of
//! a busy period they skip are sized on the path's round trip (the hosts' time out), not the
//! whole first-byte time: with the hold in it, a 100 ms store skipped the first 100 ms of
//! every busy period, longer than any of them. Nor is such a port silent (*A silent
//! server*): held bytes alone do not start the silence bound, and a grant marked stuck is
//! held no more.
//!
//! What it trades: a grant to a server that was slow lately (or, not learnt yet, to a port
//! whose servers were) and is now lost waits that hold longer before it is hedged, and a
//! store that answers sooner than it did lately sends bytes the port did not count; one
//! faster answer ends the first, the loss rules answer the second. With a 5 ms store on the
//! testbed the switch dropped about twice as many packets as with held bytes bounded by a
//! budget, for more goodput (docs/measurements.md, *Forty-third session*). What it
//! does not do: grants stay chunked, one store wait per chunk a connection has in flight,
//! and only incast-rpc's plain TCP servers report their hold (TLS and QUIC do not). See
//! docs/measurements.md, *Forty-second session*.
//!
//! # Invariants
//!
//! Checked by [`Receiver::check_invariants`], after every event in debug builds:
//!
//! 1. the port's outstanding bytes and live senders, its stuck, late and held bytes, and
//!    its senders waiting on their stores, are the sums over its reads;
//! 2. a grant of new bytes was issued only when it fitted the budget (or nothing was
//!    outstanding; held bytes within their credit and late ones do not count, and where the
//!    port's servers hold, the credit held bytes do not use adds to the budget's room, see
//!    *A slow store is not a stall*) and the sender cap (or it went to a server with grants
//!    of its read, or no sender was live; waiting senders do not count, and where the
//!    port's servers hold, a new sender passes it while the bytes sending now fit the
//!    budget and drain within [`HELD_SENDER_SHARE`] of the hold). Re-requests (hedges, drawn from the hedge bucket, and retries after
//!    failures) replace bytes the port had admitted and go first regardless: a stall may
//!    halve the budget, and the hedge of that very stall must not wait behind it;
//! 3. the order set holds exactly the live reads, each under its current key, whose rank is
//!    the read's for its start, priority and bytes left (see *Aging halves a read's size per
//!    aging bound*);
//! 4. every read's scheduler holds its own invariants;
//! 5. the budget is within its ceiling and the lowest its floor goes.
//!
//! # Cost
//!
//! O(log R) per event for R live reads (the order set), plus the scheduler's own cost; a
//! poll walks the order set only past reads that have nothing to issue. See
//! `benches/scheduler.rs` for the measured cost per event.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::time::{Duration, Instant};

use crate::policy::{Adaptation, Hedging, Policy, MAX_INFLIGHT_BUDGET, MAX_SENDERS};
use crate::rtt::RttEstimator;
use crate::scheduler::InvariantViolation;
use crate::scheduler::{Action, Delivery, EventError, Gate, GrantId, Polled, ReadError, Scheduler, SchedulerStats};
use crate::stripe::{ServerId, Stripe};

mod config;
pub use config::{ReceiverConfig, ReceiverConfigBuilder, ReceiverConfigError};

/// The hosts' part of a grant's first-byte time, as the transport measured it: what
/// [`Receiver::on_bytes_timed`] takes out before it reads a queueing delay (see *Host time
/// is not the port's queue* in the module docs). Zero where the transport cannot tell.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostTime {
    /// The server's hold: from the request's arrival at the server's host to its first
    /// write. Part of the round trip the budget must cover (a slow server is answered by
    /// more servers at once), not of the port's queue.
    pub server: Duration,
    /// The client's own wait: from the first bytes' arrival at the client's host to their
    /// read, plus any time the request waited on the client before it could go out (a
    /// connection being opened). Neither the port's queue nor a round trip more budget
    /// covers: it is the client's.
    pub client: Duration,
    /// The server's hold was longer than the transport can carry (incast-rpc: 32.767 ms),
    /// and `server` is that cap: the receiver then learns the server's store time from the
    /// grant's own first-byte time (see "A slow store is not a stall" in the module docs).
    pub server_capped: bool,
    /// Of `server`, the time the server's store took to give the bytes (a disk, an object
    /// store), where the transport tells it apart from the server host's own time (its CPU,
    /// its queue of other requests; incast-rpc: `wire::Frame::StoreTime`). What a slow
    /// store's rule learns (see *The store's part of a hold* in the module docs). `None`
    /// where the transport cannot tell: the whole hold is learnt then.
    pub store: Option<Duration>,
}

/// Default starting budget without a port-rate hint (16 KiB, the default floor; slow start
/// doubles it every round trip, see *The start* in the module docs).
pub const DEFAULT_INITIAL_BUDGET: u64 = 16 * 1024;
/// Default floor of the budget (16 KiB, one default chunk).
pub const DEFAULT_MIN_BUDGET: u64 = 16 * 1024;
/// Default ceiling of the budget (64 MiB: a 100 Gbit/s path with 5 ms of RTT).
pub const DEFAULT_MAX_BUDGET: u64 = 64 << 20;
/// Default port-wide sender cap (64).
pub const DEFAULT_PORT_MAX_SENDERS: u32 = 64;
/// Default tolerated queueing delay above the base RTT (200 us: under a 262 us full queue of
/// a 32 KiB port at 1 Gbit/s, above the ~100 us scheduling noise of a 2-core host).
pub const DEFAULT_TARGET_DELAY: Duration = Duration::from_micros(200);
/// Pacing gain over the port's rate (BBR's probing gain, 1.25): paced at exactly the rate
/// it knows, the receiver could never measure a faster one.
pub const PACING_GAIN: f64 = 1.25;
/// Whether grants carry a pacing rate by default (see [`ReceiverConfigBuilder::pacing`]).
pub const DEFAULT_PACING: bool = false;
/// Default aging bound (12.5 MB, 100 ms of a 1 Gbit/s port): the port's time, counted in
/// the bytes it could pass (time times its rate), that halves a read's bytes left in the
/// port's order (see "Aging halves a read's size per aging bound" in the module docs).
/// Measured in time on a 1 Gbit/s port with mixed reads at 50, 100, 200, 250 and 1,000 ms
/// (docs/measurements.md, *Fifty-fifth session*): the longer, the faster the small reads
/// and the slower the large ones where small reads keep the port busy.
pub const DEFAULT_AGING_BYTES: u64 = 12_500_000;
/// The largest aging bound (1 TiB, about 2.4 hours of a 1 Gbit/s port).
pub const MAX_AGING_BYTES: u64 = 1 << 40;
/// The port's rate the clock of aging runs at while the receiver knows none (no hint, no
/// sample yet): 1 Gbit/s, in bytes per second, the rate [`DEFAULT_AGING_BYTES`] was measured
/// at.
pub const AGING_REFERENCE_RATE: f64 = 125e6;
/// Steps of the port's order per aging bound of age, and per halving of a read's bytes left
/// (fixed point: see "Aging halves a read's size per aging bound" in the module docs).
const RANK_STEPS: u64 = 1024;
/// Aging bounds of age one level of [`ReadOptions::priority`] is worth: more than the
/// halvings between any two reads' sizes (at most 64), so a higher priority goes first
/// unless the lower one started this many aging bounds earlier (800 MB of the port's time
/// at the default: 6.4 s at 1 Gbit/s).
pub const PRIORITY_AGING_BOUNDS: u64 = 64;
/// The largest start a read's rank takes, in steps (later starts tie with it): keeps every
/// rank under `u64::MAX`.
const MAX_START_STEPS: u64 = 1 << 60;
/// Default share of granted bytes that may be hedged, port-wide (5%).
pub const DEFAULT_PORT_HEDGE_FRACTION: f64 = 0.05;
/// Default size of the port's hedge bucket (256 KiB): the most it may hedge in one burst.
pub const DEFAULT_HEDGE_BURST: u64 = 256 * 1024;
/// Swift's beta: the decrease per unit of relative excess delay.
pub const BETA: f64 = 0.8;
/// Swift's largest multiplicative decrease per round trip.
pub const MAX_DECREASE: f64 = 0.5;
/// Decrease on a kernel RTO a server reports (and the most a loss window takes).
pub const LOSS_DECREASE: f64 = 0.5;
/// DCTCP's gain `g` of the loss share's moving average (1/16).
pub const ALPHA_GAIN: f64 = 1.0 / 16.0;
/// Additive increase per budget's worth of delivered bytes, after the first decrease.
pub const ADDITIVE_INCREASE: u64 = 16 * 1024;
/// Base-RTT samples older than this are forgotten (10 s), so a path that got slower for
/// good is not judged against a stale minimum forever.
pub const BASE_RTT_WINDOW: Duration = Duration::from_secs(10);
/// A new chunk carries at least this much time at the port's rate (100 us), and at most
/// a [`GRANTS_PER_BUDGET`]th of the budget: on a fast path grants grow so request overhead
/// stays small (10 Gbit/s: 125 KB), while on a 1 Gbit/s port the policy's chunk stands.
/// (Grants of a quarter of a 128 KiB budget cost a lone sender a fifth of its goodput on the
/// testbed against 16 KiB chunks, with no loss: larger bursts from a TSO NIC.)
pub const GRANT_TIME: Duration = Duration::from_micros(100);
/// A new chunk is at most the budget over this (4), so several grants share the budget.
pub const GRANTS_PER_BUDGET: u64 = 4;
/// A budget under this many policy chunks (2) spends itself in smaller chunks, so that one
/// grant transfers while the next one's request travels. With the learnt target but one
/// 16 KiB grant at a time, a 16 KiB port read 36-72% of the line rate at SRU 32 KiB (one
/// testbed run, 2026-11-24; docs/measurements.md, *Other port buffers*).
pub const MIN_GRANTS_PER_BUDGET: u64 = 2;
/// On a lossy port, a budget under this many policy chunks (4) is spent in chunks of the
/// budget over this, each on a connection of its own: a read starts its untouched fragments
/// before it pipelines on started ones. See "Spreading a small budget on a lossy port" in
/// the module docs.
pub const SPREAD_GRANTS_PER_BUDGET: u64 = 4;
/// The smallest chunk a small budget shrinks the policy's chunk to (4 KiB: about three
/// segments, so a response still ends with enough segments behind a loss for fast
/// retransmit's duplicate ACKs).
pub const MIN_CHUNK: u64 = 4 * 1024;
/// The lowest a floor that follows the path goes (8 KiB: [`MIN_GRANTS_PER_BUDGET`] chunks of
/// [`MIN_CHUNK`], so one grant transfers while the next one's request travels). See "A floor
/// that follows the path" in the module docs.
pub const MIN_PATH_FLOOR: u64 = MIN_GRANTS_PER_BUDGET * MIN_CHUNK;
/// After a loss, the target delay becomes this share (1/2) of the largest queueing delay
/// the port's own grants built since the previous loss decrease: the queue at which the port's
/// buffer overflowed, about its size over its rate. See "A buffer shallower than the target"
/// in the module docs.
pub const LOSS_TARGET_SHARE: f64 = 0.5;
/// The learnt target never goes under this (50 us: the scheduling noise of first-byte
/// times on a loaded 2-core host is of this order, and a target under the noise would hold
/// growth on every sample).
pub const MIN_TARGET_DELAY: Duration = Duration::from_micros(50);
/// After a loss decrease while the queue is the port's own, the budget does not grow past
/// this share (0.85) of the budget that lost, for [`CEILING_HOLD`] (see "A ceiling learnt
/// from loss" in the module docs).
pub const LOSS_CEILING_SHARE: f64 = 0.85;
/// How long a loss ceiling lasts after the loss that set it (100 ms); losses at or under it
/// neither lower nor renew it (see "A ceiling learnt from loss" in the module docs).
pub const CEILING_HOLD: Duration = Duration::from_millis(100);
/// How long a learnt target lasts unless another reported loss renews it (1 s; see "A
/// buffer shallower than the target" in the module docs).
pub const TARGET_HOLD: Duration = Duration::from_secs(1);
/// Queueing delay above this many targets shrinks the budget (Swift's decrease); between
/// one and this many, it only stops the budget's growth (16).
pub const SEVERE_DELAY_FACTOR: u32 = 16;
/// How far above the measured rate's bandwidth-delay product (plus the target queue) the
/// budget may grow (2, Homa's overcommitment of about two messages' RTTbytes).
pub const OVERCOMMIT: f64 = 2.0;
/// Share of the port's hedge burst ([`ReceiverConfigBuilder::hedge_burst`]) one read may
/// hedge, when its policy allows less (0.5): the port's bucket bounds the hedges of all
/// reads, and half of it stays for the others while one read is stuck.
pub const READ_HEDGE_SHARE: f64 = 0.5;
/// Largest multiplier of the grant timeouts after spurious hedges (64).
pub const MAX_TIMEOUT_SCALE: u32 = 64;
/// Share of the port's rate (hint, else the largest measured lately) above which a queue
/// counts as the receiver's own and holds growth.
pub const OWN_QUEUE_SHARE: f64 = 0.6;
/// Share of the port's rate (hint, else the largest measured lately) the reads must take at a
/// reported loss for that loss to teach a ceiling (0.8); a loss below it (while the queue
/// still counts as the receiver's own, [`OWN_QUEUE_SHARE`]) ends the ceiling in force. See
/// "Only while the reads fill the port" in the module docs: the receiver's own grants
/// overflow a buffer while they fill the port, and beside bulk flows they lose while they
/// take much less of it.
pub const CEILING_RATE_SHARE: f64 = 0.8;
/// Shortest interval over which the port's delivery rate is sampled (500 us).
pub const RATE_INTERVAL: Duration = Duration::from_micros(500);
/// A sample of the port's rate (see "The port's rate" in the module docs) spans at least
/// this much busy time (5 ms), and at least [`RATE_SAMPLE_RTTS`] smoothed RTTs: bytes that
/// waited on the host before the sample began and are read in it (a coalesced interrupt, a
/// client late to read its sockets by the 0.1-1 ms of a loaded 2-core host) lift it by
/// their share of it.
pub const RATE_SAMPLE_SPAN: Duration = Duration::from_millis(5);
/// A sample of the port's rate spans at least this many smoothed RTTs of busy time (2).
pub const RATE_SAMPLE_RTTS: u32 = 2;
/// The arrivals of a busy period's first smoothed RTT, and at least of its first
/// millisecond, do not count toward a sample of the port's rate (see "The port's rate" in
/// the module docs): a client late to read its sockets (by 0.1-1 ms on a loaded 2-core
/// host) reads at once what waited in them since the period began. With the smoothed RTT
/// alone (a base RTT of 0.1 ms and 0.2 ms of queue at 1 Gbit/s on the testbed), reads of
/// 64 KiB, 0.6 ms each, read a 1 Gbit/s port as
/// 1.31-1.38 Gbit/s.
pub const RATE_SAMPLE_SKIP: Duration = Duration::from_millis(1);
/// The port's rate is the largest median of this many busy-time samples in a row (3): at
/// 100 Mbit/s on the testbed, 1 sample in 500 read 115-145 Mbit/s (the 2-core client late
/// to read its sockets), and the largest sample kept it for 10 s.
pub const RATE_SAMPLE_MEDIAN: usize = 3;
/// The longest pause of the reads' bytes, in smoothed RTTs, that the port's counter
/// counts as busy time (2): between a grant's last byte and its replacement's first, the
/// reads have nothing outstanding for about a round trip, and at a budget of two grants
/// that is every grant. Counted as idle, it ended every busy period before the first round
/// trip that a sample skips, and beside 2 bulk flows at 2 Gbit/s a read held to its 8 KiB
/// budget took no sample of the counter in a whole row (docs/measurements.md,
/// *Thirty-seventh session*). The pause's time counts too, so a token bucket that fills
/// over it adds no more than it held back. See "The port's counter" in the module docs.
pub const COUNTER_GAP_RTTS: u32 = 2;
/// A port that received no byte and issued no new grant for this long while bytes were
/// outstanding stops counting those bytes against its budget (250 ms: longer than a kernel
/// RTO of 200 ms and its retransmission, shorter than any read deadline worth having). See
/// "A silent server" in the module docs.
pub const PORT_SILENCE: Duration = Duration::from_millis(250);
/// Servers whose hold the receiver remembers (4096; see "A slow store is not a stall" in the
/// module docs): past that the table starts afresh, so its memory is bounded whatever the
/// stripes name.
pub const MAX_LEARNT_HOLDS: usize = 4096;
/// A server's learnt hold from which its grants count as held by its store until their
/// expected first byte (1 ms; see "A slow store is not a stall" in the module docs): over
/// the hosts' time of a loaded 2-core testbed at no store delay (means of 88-704 us).
pub const STORE_HOLD: Duration = Duration::from_millis(1);
/// The port's hold from which the credit that held bytes do not use adds to the budget's
/// room (4 ms; see "Released bytes do not stop the next grants" in the module docs). Not
/// [`STORE_HOLD`]: on loopback with no store delay, 16 reads of 16 servers at once made
/// the servers' own time reach 1 ms now and then; the spare credit then let more grants
/// out, the servers got slower still, and two thirds of the grants were held (the median
/// of three rounds read 0.78x of `naive`'s goodput where the build before read 1.03x).
pub const SPARE_CREDIT_HOLD: Duration = Duration::from_millis(4);
/// Share of the port's hold within which the bytes sending now must drain, at the port's
/// rate, for a new sender held by its store to pass the sender cap (0.5: half the hold is
/// left for a store that answers sooner than it did lately). See "A sender its store holds
/// is not sending yet" in the module docs.
pub const HELD_SENDER_SHARE: f64 = 0.5;
/// Share of its server's hold over which an answer held by a slow store is paced on a lossy
/// port (an eighth; see "Held answers are paced on a lossy port" in the module docs).
pub const HELD_ANSWER_SPREAD: f64 = 0.125;
/// The shortest wait of a port whose next grant waits on the credit of held bytes before it
/// looks again (1 ms; longer where the credit takes longer to fill by a grant's largest
/// chunk). Without it, grants waiting on that credit went out only at the next event, which
/// on a port whose bytes were all held came only when a store answered: a single read of
/// 8 servers of a 20 ms store took two to five holds a block. See "The credit fills between
/// events" in the module docs.
pub const CREDIT_WAKE: Duration = Duration::from_millis(1);
/// How long after a server last reported loss the port counts as lossy (1 s): while it
/// does, a grant without progress whose read has spent its hedge budget moves within
/// [`crate::scheduler::escalate_within`] (see "Stalls on a lossy port" in the module docs),
/// and stalls count as loss (see "Stalls count where loss is reported").
pub const LOSSY_PORT_WINDOW: Duration = Duration::from_secs(1);
/// How long a port must go without a loss its servers report before the growth cap covers
/// the servers' usual answer time, not only their quickest (10 s, as [`BASE_RTT_WINDOW`]):
/// see "The growth cap covers the servers, not the client" in the module docs.
pub const CLEAN_PORT_WINDOW: Duration = Duration::from_secs(10);
/// How long a new port's servers must report without loss, from the first response's
/// counters, before it counts as clean (1 s, as [`LOSSY_PORT_WINDOW`]): until then the
/// growth cap covers only the servers' quickest answer. See "The growth cap covers the
/// servers, not the client" in the module docs.
pub const CLEAN_PORT_PROBATION: Duration = Duration::from_secs(1);
/// A grant without progress for this many smoothed first-byte times past its expected
/// arrival is late (2), once the queue is not the receiver's own: see "Late grants leave the
/// budget" in the module docs.
pub const LATE_AFTER_RTTS: u32 = 2;
/// The shortest late bound (1 ms: ten times the scheduling noise of a loaded 2-core host,
/// and well under the 8-12 ms in which Linux's tail loss probe repairs a lost response).
pub const MIN_LATE_AFTER: Duration = Duration::from_millis(1);
/// A queueing delay over this many configured targets (2: 400 us by default) counts toward
/// competing with a standing queue of other traffic (see "A deep queue of other traffic" in
/// the module docs): the receiver's own queue sits under about two targets (growth stops at
/// [`OVERCOMMIT`] times the bandwidth-delay product plus one target).
pub const COMPETE_DELAY_FACTOR: u32 = 2;
/// Consecutive delay samples over [`COMPETE_DELAY_FACTOR`] targets, taken with the budget
/// near its floor, that start competing; as many consecutive samples at or under it end it (8).
pub const COMPETE_SAMPLES: u32 = 8;
/// "Near its floor": the budget at most this many times
/// [`ReceiverConfigBuilder::min_budget`] (2). Exactly at the floor was too strict: beside
/// bulk flows, loss decreases left the budget hovering a few hundred bytes over it (16,760
/// bytes over a whole configuration), and it never competed.
pub const COMPETE_FLOOR_FACTOR: u64 = 2;
/// First-byte delays of grants issued on an empty port (none of the receiver's bytes
/// outstanding) that tell whether the port holds a standing queue of other traffic (3).
/// While the median of the last this many (at least two, the newest within
/// [`BASE_RTT_WINDOW`]) is at or under [`COMPETE_DELAY_FACTOR`] targets, a slow port's
/// receiver does not compete: the queue its other samples see is its own (see "A slow port
/// is not a deep queue" in the module docs). A median, not all of them: one lost first
/// byte (a tail loss probe of 8 ms or more) must not decide.
pub const EMPTY_PORT_SAMPLES: usize = 3;
/// How many times the competing threshold the budget's floor must take to drain at the
/// port's rate for the empty port to decide ([`EMPTY_PORT_SAMPLES`]) (2: a 16 KiB floor
/// under about 164 Mbit/s with the default target). Not 1: beside bulk flows at 500 Mbit/s
/// the reads, starved, measured a port slow enough for it, and got 52.3% and 49.0% of the
/// line rate against 53.5% and 52.9% with 2 (see "A slow port is not a deep queue" in the
/// module docs).
pub const SLOW_PORT_MARGIN: f64 = 2.0;

/// Names one read of a [`Receiver`]. Unique for the receiver's lifetime.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReadKey {
    slot: u32,
    generation: u32,
}

impl fmt::Display for ReadKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "read {}.{}", self.slot, self.generation)
    }
}

/// How one read ranks against the others.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadOptions {
    /// Higher goes first (before SRPT order); default 0. One level is worth
    /// [`PRIORITY_AGING_BOUNDS`] aging bounds of age, so a read of lower priority goes first
    /// once it is that much older.
    pub priority: u8,
}

/// What the port did during one read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortReport {
    /// Smallest port budget while the read was live, bytes.
    pub budget_min: u64,
    /// Largest port budget while the read was live, bytes.
    pub budget_max: u64,
    /// Queueing-delay samples the read's grants gave.
    pub delay_samples: u32,
    /// Their mean.
    pub delay_mean: Duration,
    /// Their largest.
    pub delay_max: Duration,
    /// The mean time of the hosts taken out of those samples' first-byte times before
    /// their delay was read (see [`Receiver::on_bytes_timed`]); zero where the transport
    /// gives none.
    pub host_mean: Duration,
    /// Time the read had no grant outstanding while unfinished: waiting for the port (its
    /// turn, the budget or the sender cap).
    pub admission_wait: Duration,
    /// Time the read had grants outstanding: transferring (or waiting on its servers).
    /// Admission wait plus transfer is the read's time at the port, up to its last event.
    pub transfer: Duration,
    /// Whether the read lived longer than the aging bound (by then every read that starts
    /// after it with twice its bytes left or more goes after it).
    pub aged: bool,
}

/// A read that ended, as [`Receiver::finish_read`] returns it.
#[derive(Clone, Debug)]
pub struct FinishedRead {
    /// The scheduler's counters.
    pub stats: SchedulerStats,
    /// What the port did during the read.
    pub port: PortReport,
    /// Why it failed, if it did.
    pub error: Option<ReadError>,
    /// True if every byte arrived.
    pub complete: bool,
}

/// Port-wide counters.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ReceiverStats {
    /// The budget now, bytes.
    pub budget: u64,
    /// Bytes outstanding now, over all reads.
    pub outstanding: u64,
    /// Servers with grants outstanding now, over all reads.
    pub senders: u32,
    /// Base RTT: the smallest clean first-byte time in the window less the client's own
    /// wait ([`HostTime::client`]), the one the bandwidth-delay product uses; if measured.
    pub base_rtt: Option<Duration>,
    /// Measured delivery rate, bytes per second, if measured.
    pub rate_bytes_per_sec: Option<f64>,
    /// The port's rate as the receiver knows it: the hint, else the largest median of
    /// busy-time samples lately, of its own bytes or of the port's receive counter, the
    /// larger (see "The port's rate" and "The port's counter" in the module docs); bytes per
    /// second.
    pub link_rate_bytes_per_sec: Option<f64>,
    /// The target delay learnt at the last loss, if any (see "A buffer shallower than the
    /// target" in the module docs); it is in force for [`TARGET_HOLD`] after that loss.
    pub learnt_target: Option<Duration>,
    /// The budget's ceiling learnt at the last loss that set one (a loss over the ceiling in
    /// force, or with none in force), bytes ([`LOSS_CEILING_SHARE`]); it is in force for
    /// [`CEILING_HOLD`] after that loss.
    pub loss_ceiling: Option<u64>,
    /// The multiplier of every grant's timeout now (1 up to [`MAX_TIMEOUT_SCALE`]): a
    /// spurious hedge raises it to twice the multiplier its timer ran under, a won hedge
    /// lowers it to half of that.
    pub timeout_scale: u32,
    /// Queueing-delay samples above the target that held growth (the receiver's own queue).
    pub delay_holds: u64,
    /// Queueing-delay samples above the target that did not hold growth: the receiver took
    /// less than [`OWN_QUEUE_SHARE`] of the port's rate, so the queue was other traffic's.
    pub foreign_delays: u64,
    /// Losses a server reported while the receiver took less than [`CEILING_RATE_SHARE`] of the
    /// port's rate: they shrank the budget, taught no ceiling and ended the one in force.
    pub foreign_losses: u64,
    /// Decreases on queueing delay.
    pub delay_decreases: u64,
    /// Decreases on reported loss and stalls (loss windows, kernel RTOs).
    pub loss_decreases: u64,
    /// Stalls in slow start or on a port whose servers reported loss within
    /// [`LOSSY_PORT_WINDOW`], counted as responses that saw loss.
    pub stall_decreases: u64,
    /// Stalls past slow start on a port no server reported loss on within
    /// [`LOSSY_PORT_WINDOW`]: hedged or backed off as any stall, but not counted as loss (see
    /// "Stalls count where loss is reported" in the module docs).
    pub quiet_stalls: u64,
    /// Stalls of grants issued to a server whose store holds its answers [`STORE_HOLD`] or
    /// more: hedged or backed off as any stall, never counted as loss (see "A slow store is
    /// not a stall" in the module docs).
    pub store_stalls: u64,
    /// Servers whose grants are all held by their stores, over all reads: they leave the
    /// sender cap ([`ReceiverConfigBuilder::max_senders`]), bounded instead by the held
    /// bytes' credit (see "A slow store is not a stall" in the module docs).
    pub held_senders: u32,
    /// Held bytes that may leave the budget now, bytes: a credit that fills at the port's
    /// rate, to at most the held bytes plus the budget's room beside the late ones, and that
    /// bytes spend as their stores release them while the port is lossy (see "Bytes in a
    /// store are not in the port" in the module docs). Used once the port's rate is known.
    pub held_credit: u64,
    /// Of that credit, bytes a new grant may take beside the budget's room: what held bytes
    /// do not use, where the port's servers hold their answers [`SPARE_CREDIT_HOLD`] or more
    /// lately (0 elsewhere, and until the port's rate is known).
    pub spare_credit: u64,
    /// The hold the port's servers showed lately (see "A slow store is not a stall" in the
    /// module docs); `None` before the first, or where the transport reports none.
    pub port_hold: Option<Duration>,
    /// Hedges denied by the port's hedge bucket (not the read's).
    pub hedges_denied: u64,
    /// Times the port went silent for [`PORT_SILENCE`] and stopped counting the bytes then
    /// outstanding (see "A silent server" in the module docs).
    pub stuck_discounts: u64,
    /// Whether the receiver competes now with a standing queue of other traffic (see "A deep
    /// queue of other traffic" in the module docs).
    pub competing: bool,
    /// Whether the budget is still in slow start: it grows by the bytes each grant
    /// delivered, and a stall counts as loss, until the first decrease (see *Growth* in the
    /// module docs).
    pub slow_start: bool,
    /// Times the receiver started competing.
    pub competing_entries: u64,
    /// Bytes outstanding now that the port no longer counts against its budget: grants of
    /// reads that have delivered nothing since the port last went silent.
    pub stuck: u64,
    /// Remaining bytes of the late grants now (see "Late grants leave the budget" in the
    /// module docs); at most a budget's worth of them does not count against the budget.
    pub late: u64,
    /// Bytes outstanding now that wait in their servers' stores (see "A slow store is not a
    /// stall" in the module docs): with the late ones, at most a budget's worth of them does
    /// not count against the budget, and a port with no other bytes outstanding is idle.
    pub held: u64,
    /// Grants issued.
    pub grants: u64,
    /// Reads started.
    pub reads: u64,
    /// Samples of the port's rate taken from its receive counter
    /// ([`Receiver::on_port_bytes`]); 0 where the transport has no counter to give.
    pub counter_samples: u64,
}

/// The last `N` samples of a measure, the newest in place of the oldest (a ring), for the
/// medians the receiver's rules take of them.
#[derive(Clone, Copy, Debug)]
struct RecentSamples<T, const N: usize> {
    slots: [Option<T>; N],
    next: usize,
}

impl<T: Copy + PartialOrd, const N: usize> RecentSamples<T, N> {
    fn new() -> Self {
        Self {
            slots: [None; N],
            next: 0,
        }
    }

    fn push(&mut self, x: T) {
        self.slots[self.next] = Some(x);
        self.next = (self.next + 1) % N;
    }

    /// How many samples were taken (at most `N`).
    fn taken(&self) -> usize {
        self.slots.iter().flatten().count()
    }

    /// The median of the samples taken; of an even count, the upper of the two middle ones
    /// if `upper`, else the lower. `None` before the first.
    fn median(&self, upper: bool) -> Option<T> {
        let mut s = self.slots;
        // `None` sorts first, so the samples taken fill the top of the array.
        s.sort_unstable_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        let taken = self.taken();
        let from_top = if upper { taken.saturating_sub(1) / 2 } else { taken / 2 };
        s[N - 1 - from_top]
    }
}

/// The larger of `cur` and `x` measured at `now`; `cur` only while it is younger than
/// [`BASE_RTT_WINDOW`] (the receiver's windowed maxima of the port's rate).
fn windowed_max(cur: Option<(f64, Instant)>, x: f64, now: Instant) -> (f64, Instant) {
    match cur {
        Some((m, at)) if m >= x && now < at + BASE_RTT_WINDOW => (m, at),
        _ => (x, now),
    }
}

/// Busy-time samples of a rate, and the largest median of them lately (see "The port's
/// rate" in the module docs): the receiver keeps one for its own bytes and one for the
/// port's counter.
#[derive(Clone, Copy, Debug)]
struct BusyRate {
    /// The sample being taken: busy time, and the bytes that passed in it.
    time: Duration,
    bytes: u64,
    /// The last [`RATE_SAMPLE_MEDIAN`] samples, bytes per second.
    samples: RecentSamples<f64, RATE_SAMPLE_MEDIAN>,
    /// The largest median of them seen lately (and when), expiring after
    /// [`BASE_RTT_WINDOW`] like the base RTT.
    max: Option<(f64, Instant)>,
}

impl BusyRate {
    fn new() -> Self {
        Self {
            time: Duration::ZERO,
            bytes: 0,
            samples: RecentSamples::new(),
            max: None,
        }
    }

    /// Adds `bytes` that passed over `busy` of busy time; takes the sample once it spans
    /// [`RATE_SAMPLE_SPAN`] and [`RATE_SAMPLE_RTTS`] times `srtt`, and returns its bytes.
    fn add(&mut self, now: Instant, busy: Duration, bytes: u64, srtt: Duration) -> Option<u64> {
        self.time += busy;
        self.bytes = self.bytes.saturating_add(bytes);
        if self.time < RATE_SAMPLE_SPAN.max(srtt * RATE_SAMPLE_RTTS) {
            return None;
        }
        let taken = self.bytes;
        self.samples.push(taken as f64 / self.time.as_secs_f64());
        self.restart();
        // The median of those taken (the lower of two): one sample lifted by a host's late
        // read does not count.
        if let Some(r) = self.samples.median(false) {
            self.max = Some(windowed_max(self.max, r, now));
        }
        Some(taken)
    }

    /// Drops the sample being taken.
    fn restart(&mut self) {
        (self.time, self.bytes) = (Duration::ZERO, 0);
    }
}

#[derive(Clone, Debug)]
struct ReadState {
    sched: Scheduler,
    key: OrderKey,
    /// The read's start in steps of the port's order (see [`Receiver::rank`]).
    start_steps: u64,
    priority: u8,
    block_len: u64,
    /// Port-visible totals last seen, to apply deltas.
    outstanding: u64,
    senders: u32,
    /// Of `senders`, those whose grants are all held by their stores
    /// ([`Scheduler::held_senders`]).
    held_senders: u32,
    completed: u64,
    hedged: u64,
    /// Its scheduler's stalls of grants that were not stuck ([`Scheduler::port_stalls`]).
    stalls: u64,
    /// Its scheduler's stalls of grants to slow stores ([`Scheduler::store_stalls`]).
    store_stalls: u64,
    /// Of `outstanding`, the bytes of its stuck grants: the port stopped counting them when
    /// it went silent, each grant until a byte of it arrives ([`Scheduler::stuck_bytes`]).
    stuck: u64,
    /// Of `outstanding`, the remaining bytes of its late grants that are not stuck.
    late: u64,
    /// Of `outstanding`, the bytes of its grants held by their servers' stores
    /// ([`Scheduler::held_bytes`]).
    held: u64,
    /// Its scheduler's bytes released by their stores ([`Scheduler::released_bytes`]).
    released: u64,
    waiting_since: Option<Instant>,
    active_since: Option<Instant>,
    port: PortReport,
    delay_sum: Duration,
    /// The hosts' time taken out of those samples.
    host_sum: Duration,
}

/// Order key: (rank, see [`Receiver::rank`]; arrival number; slot).
type OrderKey = (u64, u64, u32);

#[derive(Clone, Debug, Default)]
struct Slot {
    generation: u32,
    read: Option<ReadState>,
}

/// The client-wide receiver. See the [module docs](self).
///
/// ```
/// use std::time::Instant;
/// use incast_core::receiver::{Receiver, ReceiverConfig, ReadOptions};
/// use incast_core::{Action, Delivery, Policy, ServerId, Stripe};
///
/// let servers: Vec<ServerId> = (0..4).map(ServerId).collect();
/// let mut rx = Receiver::new(ReceiverConfig::default());
/// let now = Instant::now();
/// let a = rx.start_read(now, &Stripe::fixed_block("a", &servers, 100_000)?, &Policy::default(), 1, ReadOptions::default());
/// let b = rx.start_read(now, &Stripe::fixed_block("b", &servers, 10_000)?, &Policy::default(), 2, ReadOptions::default());
/// // A perfect transport: every request is answered at once.
/// let mut first = None;
/// while let Some((read, action)) = rx.poll_action(now) {
///     if let Action::Request(g) = action {
///         first.get_or_insert(read);
///         assert!(matches!(rx.on_bytes(now, read, g.id, g.len)?, Delivery::Write { .. }));
///         rx.on_done(now, read, g.id)?;
///     }
/// }
/// assert_eq!(first, Some(b), "the shorter read goes first");
/// assert!(rx.finish_read(a).unwrap().complete && rx.finish_read(b).unwrap().complete);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct Receiver {
    config: ReceiverConfig,
    slots: Vec<Slot>,
    free: Vec<u32>,
    order: BTreeSet<OrderKey>,
    /// Live reads by start (the clock of aging then), for aging.
    arrivals: VecDeque<(f64, ReadKey)>,
    /// The clock of aging: the bytes the port could have passed since the first read, time
    /// times the port's rate (see "Aging halves a read's size per aging bound").
    aging_clock: f64,
    /// When the clock last moved.
    aging_clock_at: Option<Instant>,
    /// Reads that may have cancels to poll.
    cancels: VecDeque<ReadKey>,
    /// Reads that may have ranges to re-request (hedges, retries): served before the order.
    urgent: VecDeque<ReadKey>,
    next_seq: u64,
    outstanding: u64,
    senders: u32,
    /// Of `senders`, those waiting on their stores (summed over the reads).
    held_senders: u32,
    budget: u64,
    slow_start: bool,
    last_decrease: Option<Instant>,
    base_rtt: Option<(Duration, Instant)>,
    /// The smallest first-byte time less the hosts' time within [`BASE_RTT_WINDOW`], and
    /// when it was seen: the base of the path's queueing delay.
    path_base: Option<(Duration, Instant)>,
    /// The smallest first-byte time less the client's own wait within [`BASE_RTT_WINDOW`]:
    /// the base RTT of the bandwidth-delay product, the servers' hold included.
    served_base: Option<(Duration, Instant)>,
    /// The servers' host time (their hold less their stores' part), smoothed as the RTT is
    /// (gain 1/8): their usual answer, which the growth cap covers on a port clean of loss
    /// ([`Receiver::is_clean`]).
    host_srtt: Option<Duration>,
    /// Per server, the hold its clean first bytes showed lately (see "A slow store is not a
    /// stall" in the module docs); at most [`MAX_LEARNT_HOLDS`] servers.
    holds: HashMap<ServerId, Duration>,
    /// The same, over every server's samples: what a grant to a server not learnt yet is
    /// expected to wait (see "A slow store is not a stall" in the module docs).
    port_hold: Option<Duration>,
    /// Held bytes that may leave the budget: they fill at the port's rate, to at most the
    /// held bytes plus a budget (see "Bytes in a store are not in the port").
    held_credit: u64,
    /// When `held_credit` was last refilled.
    credit_at: Option<Instant>,
    srtt: Option<Duration>,
    rate: Option<f64>,
    /// Busy-time samples of the port's rate from the receiver's own bytes (see "The port's
    /// rate" in the module docs).
    own_rate: BusyRate,
    /// The largest smoothed delivery rate seen lately (and when): the port's rate until the
    /// first busy-time sample.
    max_smoothed_rate: Option<(f64, Instant)>,
    rate_window: Option<(Instant, u64)>,
    /// When the port's busy period began (its first byte), and the last byte's arrival and
    /// whether bytes were still outstanding after it.
    busy_since: Option<Instant>,
    busy_last: Option<(Instant, bool)>,
    /// When the port's busy period began as the port's counter sees it: as `busy_since`,
    /// but a pause of the reads' bytes no longer than [`COUNTER_GAP_RTTS`] smoothed RTTs
    /// (a grant's replacement on its way) does not end it (see "The port's counter").
    counter_busy_since: Option<Instant>,
    /// Bytes of the receiver's grants that arrived, duplicates included (what its port
    /// passed for it).
    arrived: u64,
    /// The port's receive counter at its last reading ([`Receiver::on_port_bytes`]): when,
    /// the bytes it had counted, and [`Receiver::arrived`] then.
    counter_at: Option<(Instant, u64, u64)>,
    /// The receiver's own bytes in the counter's sample being taken.
    counter_own: u64,
    /// The receiver's share of the port's bytes in the last [`RATE_SAMPLE_MEDIAN`] samples
    /// of the counter, and when the newest was taken.
    counter_shares: RecentSamples<f64, RATE_SAMPLE_MEDIAN>,
    counter_share_at: Option<Instant>,
    /// Busy-time samples of the port's counter: the port's rate with every flow through it
    /// counted, the receiver's own and others' (see "The port's counter").
    counter_rate: BusyRate,
    delivered: u64,
    hedge_tokens: u64,
    /// When the hedge bucket last refilled with time.
    hedge_refilled: Option<Instant>,
    /// When the read at the head of the order, blocked by the port with credit of held
    /// bytes still to fill, is looked at again ([`CREDIT_WAKE`]); set by the last
    /// [`Receiver::poll_action`].
    credit_wake: Option<(Instant, ReadKey)>,
    timeout_scale: u32,
    hold_until: Option<Instant>,
    /// The last sign of life on the port: a byte received or a grant of new bytes issued.
    alive_at: Option<Instant>,
    /// Sum of the reads' `stuck` bytes.
    stuck: u64,
    /// Sum of the reads' `late` bytes.
    late: u64,
    /// Sum of the reads' `held` bytes.
    held: u64,
    /// Smoothed first-byte time less both hosts' time (the path's round trip), which sizes
    /// the port's rate samples (see "A slow store is not a stall").
    path_srtt: Option<Duration>,
    /// DCTCP's alpha: the smoothed share of responses that saw loss.
    alpha: f64,
    /// The largest queueing delay of the receiver's own queue since the last loss decrease.
    peak_delay: Duration,
    /// The target learnt at the last reported loss, and when ([`LOSS_TARGET_SHARE`]); it
    /// lapses after [`TARGET_HOLD`].
    learnt_target: Option<(Duration, Instant)>,
    /// The ceiling learnt at the last loss decrease that set one, and when
    /// ([`LOSS_CEILING_SHARE`]); it lapses after [`CEILING_HOLD`].
    loss_ceiling: Option<(u64, Instant)>,
    ends: u64,
    lossy: u64,
    /// Of `lossy`, the responses whose servers reported loss (not stalls).
    reported_lossy: u64,
    /// When a server last reported loss ([`LOSSY_PORT_WINDOW`]).
    last_loss_report: Option<Instant>,
    /// When the first response's counters came in: a port with no loss reported counts as
    /// clean only [`CLEAN_PORT_PROBATION`] after it ([`Receiver::is_clean`]).
    first_report: Option<Instant>,
    loss_window_start: Option<Instant>,
    rtt: Option<RttEstimator>,
    stats: ReceiverStats,
    /// Consecutive delay samples over the competing threshold taken with the budget near its
    /// floor.
    floor_over: u32,
    /// Consecutive delay samples at or under the competing threshold.
    under: u32,
    /// Whether the receiver competes with a standing queue of other traffic.
    competing: bool,
    /// A grant went out on an empty port: the next delay sample is an empty port's.
    empty_port_armed: bool,
    /// The last [`EMPTY_PORT_SAMPLES`] delays of grants issued on an empty port.
    empty_port_delays: RecentSamples<Duration, EMPTY_PORT_SAMPLES>,
    /// When the newest of them was taken.
    empty_port_at: Option<Instant>,
}

impl Receiver {
    /// A receiver for one port.
    pub fn new(config: ReceiverConfig) -> Self {
        let rate = config.port_rate_bps.map(|b| b as f64 / 8.0);
        Self {
            budget: config.initial_budget,
            hedge_tokens: config.hedge_burst,
            hedge_refilled: None,
            credit_wake: None,
            timeout_scale: 1,
            hold_until: None,
            alive_at: None,
            stuck: 0,
            late: 0,
            held: 0,
            path_srtt: None,
            alpha: 1.0,
            peak_delay: Duration::ZERO,
            learnt_target: None,
            loss_ceiling: None,
            ends: 0,
            lossy: 0,
            reported_lossy: 0,
            last_loss_report: None,
            first_report: None,
            loss_window_start: None,
            config,
            slots: Vec::new(),
            free: Vec::new(),
            order: BTreeSet::new(),
            arrivals: VecDeque::new(),
            aging_clock: 0.0,
            aging_clock_at: None,
            cancels: VecDeque::new(),
            urgent: VecDeque::new(),
            next_seq: 0,
            outstanding: 0,
            senders: 0,
            held_senders: 0,
            slow_start: true,
            last_decrease: None,
            base_rtt: None,
            path_base: None,
            served_base: None,
            host_srtt: None,
            holds: HashMap::new(),
            port_hold: None,
            held_credit: 0,
            credit_at: None,
            srtt: None,
            rate,
            own_rate: BusyRate::new(),
            max_smoothed_rate: None,
            rate_window: None,
            busy_since: None,
            busy_last: None,
            counter_busy_since: None,
            arrived: 0,
            counter_at: None,
            counter_own: 0,
            counter_shares: RecentSamples::new(),
            counter_share_at: None,
            counter_rate: BusyRate::new(),
            delivered: 0,
            rtt: None,
            stats: ReceiverStats::default(),
            floor_over: 0,
            under: 0,
            competing: false,
            empty_port_armed: false,
            empty_port_delays: RecentSamples::new(),
            empty_port_at: None,
        }
    }

    /// Starts a read of `stripe`. The policy's grant size, pipeline depth, stagger, hedging
    /// and RTO bounds apply to it; its budget, sender cap and adaptation are the port's.
    /// `seed` drives its timeout jitter (give each read its own).
    pub fn start_read(
        &mut self,
        now: Instant,
        stripe: &Stripe,
        policy: &Policy,
        seed: u64,
        opts: ReadOptions,
    ) -> ReadKey {
        // The port's bucket is the hedge budget that matters; a read may spend up to half its
        // burst ([`READ_HEDGE_SHARE`]), so that a read stuck on a frozen server leaves the
        // other half to the rest. Under the read's own budget alone (64 KiB, or 5% of the
        // block) a read that stalled three times on a 16 KiB port had its next hedge denied
        // and waited out a kernel RTO (one read in about 400 on the testbed).
        let hedging = match policy.hedging() {
            Hedging::AfterRto {
                budget_fraction,
                min_budget_bytes,
            } => Hedging::AfterRto {
                budget_fraction,
                min_budget_bytes: min_budget_bytes.max((self.config.hedge_burst as f64 * READ_HEDGE_SHARE) as u64),
            },
            off => off,
        };
        let policy = crate::policy::PolicyBuilder::from(policy.clone())
            .max_senders(MAX_SENDERS)
            .inflight_budget(MAX_INFLIGHT_BUDGET)
            .adaptation(Adaptation::Static)
            .hedging(hedging)
            .build()
            .expect("a valid policy with the widest budget and sender cap stays valid");
        let sched = match &self.rtt {
            Some(rtt) => Scheduler::with_rtt(stripe, &policy, seed, rtt.clone()),
            None => Scheduler::new(stripe, &policy, seed),
        };
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.slots.push(Slot::default());
                (self.slots.len() - 1) as u32
            }
        };
        let seq = self.next_seq;
        self.next_seq += 1;
        let block_len = stripe.block_len();
        let clock = self.tick_aging_clock(now);
        let start_steps = match self.config.aging_bytes {
            0 => 0,
            // Past 2^60 steps (2^50 bounds: at 1 byte a bound, a petabyte) later reads tie;
            // a float past the largest u64 saturates.
            aging => ((clock / aging as f64 * RANK_STEPS as f64) as u64).min(MAX_START_STEPS),
        };
        let key = (self.rank(start_steps, opts.priority, block_len), seq, slot);
        let s = &mut self.slots[slot as usize];
        s.read = Some(ReadState {
            sched,
            key,
            start_steps,
            priority: opts.priority,
            block_len,
            outstanding: 0,
            senders: 0,
            held_senders: 0,
            completed: 0,
            hedged: 0,
            stalls: 0,
            store_stalls: 0,
            stuck: 0,
            late: 0,
            held: 0,
            released: 0,
            waiting_since: Some(now),
            active_since: None,
            port: PortReport {
                budget_min: self.budget,
                budget_max: self.budget,
                ..PortReport::default()
            },
            delay_sum: Duration::ZERO,
            host_sum: Duration::ZERO,
        });
        let rk = ReadKey {
            slot,
            generation: s.generation,
        };
        self.order.insert(key);
        self.arrivals.push_back((clock, rk));
        self.loss_window_start.get_or_insert(now);
        self.stats.reads += 1;
        self.debug_check();
        rk
    }

    /// Ends read `read`: completed, failed, or dropped by the caller half-way. Its grants no
    /// longer count against the port (the transport should drop their connections' late
    /// bytes, as it does for cancels). `None` for a key that is not live.
    pub fn finish_read(&mut self, read: ReadKey) -> Option<FinishedRead> {
        self.read(read)?;
        let s = &mut self.slots[read.slot as usize];
        let r = s.read.take().expect("checked live");
        s.generation = s.generation.wrapping_add(1);
        self.free.push(read.slot);
        self.order.remove(&r.key);
        self.outstanding -= r.outstanding;
        self.stuck -= r.stuck;
        self.late -= r.late;
        self.held -= r.held;
        self.senders -= r.senders;
        self.held_senders -= r.held_senders;
        if r.sched.rtt().samples() > 0 {
            self.rtt = Some(r.sched.rtt().clone());
        }
        let mut port = r.port;
        if port.delay_samples > 0 {
            port.delay_mean = r.delay_sum / port.delay_samples;
            port.host_mean = r.host_sum / port.delay_samples;
        }
        self.debug_check();
        Some(FinishedRead {
            stats: r.sched.stats(),
            port,
            error: r.sched.error().cloned(),
            complete: r.sched.is_complete(),
        })
    }

    // ----- outputs -----

    /// The next thing to do and the read it is for, or `None` until an event or a timeout.
    /// Cancels come first; then re-requests; then grants in the port's order (shortest
    /// remaining read first, with aging).
    pub fn poll_action(&mut self, now: Instant) -> Option<(ReadKey, Action)> {
        while let Some(&rk) = self.cancels.front() {
            match self.read_mut(rk).and_then(|r| r.sched.poll_cancel()) {
                Some(a) => return Some((rk, a)),
                None => {
                    self.cancels.pop_front();
                }
            }
        }
        self.age(now);
        // Re-requests replace admitted bytes: they go first, whichever read they belong to
        // (the closed gate lets nothing else through).
        while let Some(&rk) = self.urgent.front() {
            let gate = Gate {
                ahead: self.ahead(),
                timeout_scale: self.timeout_scale,
                ..Gate::CLOSED
            };
            match self.read_mut(rk).map(|r| r.sched.poll_gated(now, &gate)) {
                Some(Polled::Action(mut a)) => {
                    self.stats.grants += 1;
                    let hold = self.expect_hold(now, rk, &a);
                    self.sync(now, rk);
                    self.set_pace(now, hold, &mut a);
                    return Some((rk, a));
                }
                _ => {
                    self.urgent.pop_front();
                }
            }
        }
        self.discount_silence(now);
        self.refill_credit(now);
        self.credit_wake = None;
        let gate = self.gate(now);
        let mut cursor = self.order.iter().next().copied();
        while let Some(key) = cursor {
            let rk = self.key_of(key);
            let r = self.read_mut(rk).expect("ordered reads are live");
            match r.sched.poll_gated(now, &gate) {
                Polled::Action(mut a) => {
                    if let Action::Request(g) = &a {
                        debug_assert!(
                            matches!(g.kind, crate::GrantKind::Hedge | crate::GrantKind::Retry)
                                || self.counted() == 0
                                || g.len <= self.budget.saturating_sub(self.counted()) + self.spare_credit(),
                            "grant of {} over the port budget {} (and {} of spare credit) with {} counted",
                            g.len,
                            self.budget,
                            self.spare_credit(),
                            self.counted()
                        );
                        self.stats.grants += 1;
                        // The first first byte after this grant crosses a port that holds
                        // none of the receiver's bytes.
                        self.empty_port_armed |= self.outstanding == 0;
                        if !matches!(g.kind, crate::GrantKind::Hedge | crate::GrantKind::Retry) {
                            self.alive_at = Some(now);
                        }
                        if g.kind != crate::GrantKind::Hedge {
                            let fill = (g.len as f64 * self.config.hedge_fraction) as u64;
                            self.hedge_tokens = (self.hedge_tokens + fill).min(self.config.hedge_burst);
                        }
                    }
                    let hold = self.expect_hold(now, rk, &a);
                    self.spend_spare_credit(&a, hold);
                    self.sync(now, rk);
                    self.set_pace(now, hold, &mut a);
                    return Some((rk, a));
                }
                Polled::Blocked => {
                    self.credit_wake = self.credit_wake_at(now).map(|t| (t, rk));
                    return None;
                }
                Polled::Idle => {
                    cursor = self
                        .order
                        .range((std::ops::Bound::Excluded(key), std::ops::Bound::Unbounded))
                        .next()
                        .copied();
                }
            }
        }
        None
    }

    /// The earliest instant at which read `read` has a timer due, if any. A read with nothing
    /// outstanding (held back by the port) is also due when the port would stop counting
    /// silent bytes ([`PORT_SILENCE`]): poll it then, and it may get its grant. The read
    /// the port last held back with credit of held bytes still to fill is due when that
    /// credit has grown by a grant (see "The credit fills between events" in the module
    /// docs).
    pub fn poll_timeout_of(&mut self, read: ReadKey) -> Option<Instant> {
        let silence = self.silence_deadline();
        let r = self.read_mut(read)?;
        let own = r.sched.poll_timeout();
        // A read the port holds back is woken when the port would discount silent bytes.
        let held = !r.sched.is_finished() && r.outstanding == 0;
        let credit = self.credit_wake.filter(|&(_, k)| k == read).map(|(t, _)| t);
        own.into_iter().chain(silence.filter(|_| held)).chain(credit).min()
    }

    /// When the port looks again for the credit of held bytes, if the last
    /// [`Receiver::poll_action`] held a read back with that credit still to fill (see "The
    /// credit fills between events" in the module docs). O(1); already in
    /// [`Receiver::poll_timeout`] and in the held-back read's [`Receiver::poll_timeout_of`]:
    /// a transport whose reads keep their own timers tells the one it wakes when the read
    /// that polled is another.
    pub fn credit_wake(&self) -> Option<Instant> {
        self.credit_wake.map(|(t, _)| t)
    }

    /// The earliest timer over all reads, the port's silence deadline and its wake for the
    /// credit of held bytes. O(reads): a
    /// transport that drives each read from its own task should use
    /// [`Receiver::poll_timeout_of`].
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        let silence = self.silence_deadline();
        let own = self
            .slots
            .iter_mut()
            .filter_map(|s| s.read.as_mut())
            .filter_map(|r| r.sched.poll_timeout())
            .min();
        let credit = self.credit_wake.map(|(t, _)| t);
        own.into_iter().chain(silence).chain(credit).min()
    }

    // ----- inputs -----

    /// Fires the timers of read `read` due at `now` (stalled grants are hedged within the
    /// port's hedge bucket, or backed off).
    pub fn handle_timeout_of(&mut self, now: Instant, read: ReadKey) -> Result<(), EventError> {
        self.refill_hedges(now);
        // On a port whose servers report loss, a stall is most likely a lost tail that only
        // the server's RTO would repair: a grant that cannot be hedged moves before it.
        let lossy = self.is_lossy(now);
        let gate = Gate {
            hedge_room: self.hedge_tokens,
            timeout_scale: self.timeout_scale,
            escalate_within: lossy.then(|| crate::scheduler::escalate_within(self.srtt)),
            late_after: self.late_after(),
            ..Gate::OPEN
        };
        let r = self.read_mut(read).ok_or(EventError::UnknownRead { read })?;
        let denied = r.sched.stats().hedges_denied;
        r.sched.handle_timeout_gated(now, &gate);
        let denied = r.sched.stats().hedges_denied - denied;
        self.stats.hedges_denied += denied;
        self.sync(now, read);
        self.debug_check();
        Ok(())
    }

    /// Fires every read's timers due at `now`. O(reads).
    pub fn handle_timeout(&mut self, now: Instant) {
        let due: Vec<ReadKey> = (0..self.slots.len())
            .filter_map(|i| {
                let s = &mut self.slots[i];
                let gen = s.generation;
                let r = s.read.as_mut()?;
                r.sched.poll_timeout().filter(|t| *t <= now).map(|_| ReadKey {
                    slot: i as u32,
                    generation: gen,
                })
            })
            .collect();
        for rk in due {
            let _ = self.handle_timeout_of(now, rk);
        }
    }

    /// `n` more bytes of grant `id` of read `read` arrived. See [`Scheduler::on_bytes`]. The
    /// same as [`Receiver::on_bytes_timed`] with no host time.
    pub fn on_bytes(&mut self, now: Instant, read: ReadKey, id: GrantId, n: u64) -> Result<Delivery, EventError> {
        self.on_bytes_timed(now, read, id, n, HostTime::default())
    }

    /// `n` more bytes of grant `id` of read `read` arrived, and `host` of the time since the
    /// grant was issued was spent in the hosts, not on the path: the server's hold of the
    /// request (incast-rpc: `wire::Header::hold`) and the time the bytes waited in the
    /// client's socket before it read them. Counted only for a grant's first bytes, where
    /// it is taken out of the first byte's time before a queueing delay is read into it (see
    /// *Host time is not the port's queue* in the module docs); the RTT estimate that times
    /// stalls keeps the whole time. See [`Scheduler::on_bytes`].
    pub fn on_bytes_timed(
        &mut self,
        now: Instant,
        read: ReadKey,
        id: GrantId,
        n: u64,
        host: HostTime,
    ) -> Result<Delivery, EventError> {
        let r = self.read_mut(read).ok_or(EventError::UnknownRead { read })?;
        let first = if host.server.is_zero() {
            None
        } else {
            r.sched.first_bytes_of(id)
        };
        let d = r.sched.on_bytes(now, id, n)?;
        let sample = r.sched.take_sample();
        // Only a first byte on an idle connection: one queued behind another response was
        // held only for what its store took past that response's end (incast-rpc times it
        // so, `wire::Header::hold`; read ahead, that is nothing), and without a store delay
        // its hold is the server host's CPU.
        if let (Some((server, issued)), Some(_)) = (first, sample) {
            let hold = match host.store {
                // The store's own time: the rest of the hold was the server host's.
                Some(store) => store,
                None if host.server_capped => host.server.max(now.saturating_duration_since(issued)),
                None => host.server,
            };
            self.learn_hold(server, hold);
        }
        if n > 0 {
            // The port is alive (the grant's own bytes count again: `sync`).
            self.alive_at = Some(now);
        }
        if matches!(d, Delivery::Write { .. }) {
            self.delivered += n;
        }
        self.arrived = self.arrived.saturating_add(n);
        if let Some((s, clamped)) = sample {
            // A clamped first byte measured a loss's repair up to the late bound; the hosts'
            // time does not come out of that bound.
            let host = if clamped { HostTime::default() } else { host };
            self.on_sample(now, read, s, host);
        }
        self.sample_rate(now);
        self.sync(now, read);
        self.sample_port_rate(now, n);
        Ok(d)
    }

    /// The server of grant `id` of read `read` announced its fragment's length. See
    /// [`Scheduler::on_length`]: the port gets back the budget the grant held beyond it.
    pub fn on_length(&mut self, now: Instant, read: ReadKey, id: GrantId, len: u64) -> Result<(), EventError> {
        let r = self.read_mut(read).ok_or(EventError::UnknownRead { read })?;
        r.sched.on_length(now, id, len)?;
        self.sync(now, read);
        self.debug_check();
        Ok(())
    }

    /// Grant `id` of read `read` is done. See [`Scheduler::on_done`].
    pub fn on_done(&mut self, now: Instant, read: ReadKey, id: GrantId) -> Result<(), EventError> {
        let r = self.read_mut(read).ok_or(EventError::UnknownRead { read })?;
        r.sched.on_done(now, id)?;
        self.sync(now, read);
        self.debug_check();
        Ok(())
    }

    /// Grant `id` of read `read` failed. See [`Scheduler::on_failed`].
    pub fn on_failed(&mut self, now: Instant, read: ReadKey, id: GrantId) -> Result<(), EventError> {
        let r = self.read_mut(read).ok_or(EventError::UnknownRead { read })?;
        r.sched.on_failed(now, id)?;
        self.sync(now, read);
        self.debug_check();
        Ok(())
    }

    /// Grant `id` of read `read` lost its connection. See [`Scheduler::on_lost`].
    pub fn on_lost(&mut self, now: Instant, read: ReadKey, id: GrantId) -> Result<(), EventError> {
        let r = self.read_mut(read).ok_or(EventError::UnknownRead { read })?;
        r.sched.on_lost(now, id)?;
        self.sync(now, read);
        self.debug_check();
        Ok(())
    }

    /// The port's receive counter read `received` bytes at `now`: every byte the client's
    /// network interface received, of every flow through its port (Linux's `rx_bytes`).
    /// Optional; the transport calls it now and then (incast-rpc: at most once a
    /// millisecond, as bytes arrive). The receiver takes samples of the port's rate from it
    /// over its busy time, as from its own bytes (see "The port's counter" in the module
    /// docs): beside other traffic they count the port's whole rate, where its own bytes
    /// count only the reads' share. A counter that went backwards (reset) starts anew.
    pub fn on_port_bytes(&mut self, now: Instant, received: u64) {
        let Some((then, before, own_before)) = self.counter_at.replace((now, received, self.arrived)) else {
            return;
        };
        if received < before || now <= then {
            self.counter_rate.restart();
            self.counter_own = 0;
            return;
        }
        // The whole interval was busy: bytes outstanding since at least one smoothed RTT
        // and RATE_SAMPLE_SKIP before it began (no token bucket's burst after an idle port
        // in it), and still outstanding now, pauses of a grant's replacement bridged (see
        // COUNTER_GAP_RTTS).
        let busy = self.counter_busy(now)
            && self
                .counter_busy_since
                .is_some_and(|since| since + self.busy_skip() <= then);
        if !busy {
            return;
        }
        self.counter_own = self.counter_own.saturating_add(self.arrived - own_before);
        let srtt = self.rate_rtt();
        let Some(port_bytes) = self.counter_rate.add(now, now - then, received - before, srtt) else {
            return;
        };
        self.stats.counter_samples += 1;
        if port_bytes > 0 {
            // Own bytes are payload and the counter counts headers too: alone on the port
            // the share is about 0.95 (1448 of 1514 bytes a frame at an MTU of 1500).
            let share = (self.counter_own as f64 / port_bytes as f64).min(1.0);
            self.counter_shares.push(share);
            self.counter_share_at = Some(now);
        }
        self.counter_own = 0;
    }

    /// The receiver's share of the bytes its port passed lately, by the port's counter: the
    /// median (the upper of two) of its last [`RATE_SAMPLE_MEDIAN`] samples, while the newest
    /// is within [`BASE_RTT_WINDOW`] of the newest counter reading. `None` without a counter.
    fn counter_share(&self) -> Option<f64> {
        let (at, (now, _, _)) = (self.counter_share_at?, self.counter_at?);
        if now >= at + BASE_RTT_WINDOW {
            return None;
        }
        self.counter_shares.median(true)
    }

    /// A response ended and its server reported `retransmits` retransmitted segments and
    /// `rtos` kernel RTOs (or a QUIC connection `rtos` loss events) while answering. Call it
    /// for every response that carries counters, zeros included: the share of responses
    /// that saw loss is what the budget reacts to (see the module docs).
    pub fn on_loss(&mut self, now: Instant, retransmits: u64, rtos: u64) {
        self.ends += 1;
        self.first_report.get_or_insert(now);
        if retransmits + rtos > 0 {
            self.lossy += 1;
            self.reported_lossy += 1;
            self.last_loss_report = Some(now);
        }
        if rtos > 0 {
            self.loss_decrease(now, 1.0 - LOSS_DECREASE, true);
        }
        self.loss_window(now);
    }

    /// Once per smoothed RTT: folds the share of responses that saw loss (stalls in slow
    /// start or on a lossy port count as such) into `alpha`, DCTCP's estimate, and shrinks
    /// the budget by `alpha / 2` if any did.
    fn loss_window(&mut self, now: Instant) {
        let span = self.srtt.unwrap_or(Duration::from_micros(100));
        let start = *self.loss_window_start.get_or_insert(now);
        if now < start + span || self.ends == 0 {
            return;
        }
        let frac = self.lossy as f64 / self.ends as f64;
        self.alpha = self.alpha * (1.0 - ALPHA_GAIN) + frac.min(1.0) * ALPHA_GAIN;
        if self.lossy > 0 {
            self.loss_decrease(now, 1.0 - self.alpha / 2.0, self.reported_lossy > 0);
        }
        self.ends = 0;
        self.lossy = 0;
        self.reported_lossy = 0;
        self.loss_window_start = Some(now);
    }

    /// A decrease on loss: when the queue is the receiver's own and `reported` (a server
    /// reported the loss), the target delay becomes [`LOSS_TARGET_SHARE`] of the largest
    /// queueing delay since the previous one (the queue at which the buffer overflowed),
    /// never under [`MIN_TARGET_DELAY`] nor over the configured target.
    ///
    /// It also sets the budget's ceiling to [`LOSS_CEILING_SHARE`] of the budget that lost
    /// (and cuts the budget to it), when `reported` (a server reported the loss) and the
    /// receiver takes at least [`CEILING_RATE_SHARE`] of the port's rate; a reported loss
    /// under that share, with the queue still the receiver's own, ends the ceiling in force
    /// instead. Stalls alone teach no ceiling: on a busy host they come from the CPU, not the
    /// buffer (on loopback, 64 servers x 16 reads, a ceiling learnt from stalls in slow start
    /// held the budget at 100-200 KiB, 0.88x of `naive`).
    fn loss_decrease(&mut self, now: Instant, f: f64, reported: bool) {
        let lost_at = self.budget;
        let loss_floor = self.loss_floor();
        if !self.decrease(now, f, loss_floor) {
            return;
        }
        self.stats.loss_decreases += 1;
        let peak = std::mem::take(&mut self.peak_delay);
        if !self.queue_is_ours() {
            return;
        }
        // Stalls teach no target, as they teach no ceiling (below): on a busy host they come
        // from its CPU, not from the buffer.
        if peak > Duration::ZERO && reported {
            let t = peak
                .mul_f64(LOSS_TARGET_SHARE)
                .clamp(MIN_TARGET_DELAY, self.config.target_delay);
            self.learnt_target = Some((t, now));
        }
        if !reported {
            return;
        }
        // Only a loss while the reads fill the port is one their own budget caused: beside
        // bulk flows the reads lose at any budget, and a ceiling from those losses ratcheted
        // their budget down to one bandwidth-delay product. Such a loss also ends the ceiling
        // in force: it was learnt while the reads had the port, and another flow now shares it.
        if !self.takes_share(CEILING_RATE_SHARE) {
            self.stats.foreign_losses += 1;
            self.loss_ceiling = None;
            return;
        }
        // Never under one bandwidth-delay product plus the target queue (Homa's RTTbytes, as
        // in `grow`): a ceiling there would cut goodput, not only the queue.
        // A loss at or under the ceiling in force says nothing about the ceiling: under it,
        // the budget was cut below it by a previous loss or another flow filled the buffer
        // (a busy neighbour would ratchet it down to the floor); at it, the budget most
        // likely sits where the loss that set it cut it, and the loss is that overflow's,
        // reported late (see "A ceiling learnt from loss" in the module docs).
        if self.ceiling(now).is_some_and(|c| lost_at <= c) {
            return;
        }
        let rtt_bytes = self.bdp(now).unwrap_or(0.0) as u64;
        let ceiling = ((lost_at as f64 * LOSS_CEILING_SHARE) as u64)
            .max(rtt_bytes)
            .clamp(loss_floor, self.config.max_budget);
        self.budget = self.budget.min(ceiling);
        self.loss_ceiling = Some((ceiling, now));
    }

    /// The ceiling in force: the one learnt at the last loss while it lasts.
    fn ceiling(&self, now: Instant) -> Option<u64> {
        match self.loss_ceiling {
            Some((c, at)) if now < at + CEILING_HOLD => Some(c),
            _ => None,
        }
    }

    /// The target delay in force: the learnt one while it lasts, else the configured one.
    fn target(&self, now: Instant) -> Duration {
        match self.learnt_target {
            Some((t, at)) if now < at + TARGET_HOLD => t,
            _ => self.config.target_delay,
        }
    }

    // ----- state -----

    /// Whether read `read` completed or failed (`None`: not a live read).
    pub fn is_finished(&self, read: ReadKey) -> Option<bool> {
        self.read(read).map(|r| r.sched.is_finished())
    }
    /// Why read `read` failed, if it did.
    pub fn error(&self, read: ReadKey) -> Option<&ReadError> {
        self.read(read).and_then(|r| r.sched.error())
    }
    /// Read `read`'s scheduler counters.
    pub fn read_stats(&self, read: ReadKey) -> Option<SchedulerStats> {
        self.read(read).map(|r| r.sched.stats())
    }
    /// Read `read`'s block length.
    pub fn block_len(&self, read: ReadKey) -> Option<u64> {
        self.read(read).map(|r| r.block_len)
    }
    /// Bytes of read `read` confirmed so far ([`Scheduler::completed_bytes`]; `None`: not a
    /// live read).
    pub fn completed_bytes(&self, read: ReadKey) -> Option<u64> {
        self.read(read).map(|r| r.sched.completed_bytes())
    }
    /// Bytes of fragment `fragment` of read `read` confirmed so far
    /// ([`Scheduler::fragment_confirmed`]; `None`: not a live read, or no such fragment).
    pub fn fragment_confirmed(&self, read: ReadKey, fragment: usize) -> Option<u64> {
        self.read(read).and_then(|r| r.sched.fragment_confirmed(fragment))
    }
    /// The length of fragment `fragment` of read `read`, once known
    /// ([`Scheduler::fragment_len`]).
    pub fn fragment_len(&self, read: ReadKey, fragment: usize) -> Option<u64> {
        self.read(read).and_then(|r| r.sched.fragment_len(fragment))
    }
    /// Port-wide counters.
    pub fn stats(&self) -> ReceiverStats {
        ReceiverStats {
            budget: self.budget,
            outstanding: self.outstanding,
            senders: self.senders,
            base_rtt: self.served_base.map(|(d, _)| d),
            rate_bytes_per_sec: self.rate,
            link_rate_bytes_per_sec: self.link_rate(),
            learnt_target: self.learnt_target.map(|(t, _)| t),
            loss_ceiling: self.loss_ceiling.map(|(c, _)| c),
            stuck: self.stuck,
            late: self.late,
            held: self.held,
            timeout_scale: self.timeout_scale,
            competing: self.competing,
            slow_start: self.slow_start,
            held_senders: self.held_senders,
            held_credit: self.held_credit,
            spare_credit: self.spare_credit(),
            port_hold: self.port_hold,
            ..self.stats
        }
    }
    /// Whether a cancel is waiting to be polled: until it is, the port no longer counts the
    /// cancelled grant's bytes, while the transport still has its request out.
    pub fn has_pending_cancels(&self) -> bool {
        self.cancels
            .iter()
            .any(|&rk| self.read(rk).is_some_and(|r| r.sched.has_cancels()))
    }

    /// Whether a server reported loss within [`LOSSY_PORT_WINDOW`] of `now`: stalls on this
    /// port are then most likely lost tails that only the servers' RTOs would repair (see
    /// "Stalls on a lossy port" in the module docs), and count as loss. Transports use it to
    /// reset a connection that owes only cancelled responses before its server's RTO fires.
    pub fn is_lossy(&self, now: Instant) -> bool {
        self.last_loss_report.is_some_and(|t| now < t + LOSSY_PORT_WINDOW)
    }
    /// Whether the port is clean of loss at `now`: its servers reported none for
    /// [`CLEAN_PORT_WINDOW`], or, where they never reported any, for
    /// [`CLEAN_PORT_PROBATION`] since the first response's counters. A port whose servers
    /// never reported counters is not clean: nothing is known of its buffer.
    pub fn is_clean(&self, now: Instant) -> bool {
        match (self.last_loss_report, self.first_report) {
            (Some(t), _) => now >= t + CLEAN_PORT_WINDOW,
            (None, Some(first)) => now >= first + CLEAN_PORT_PROBATION,
            (None, None) => false,
        }
    }
    /// The budget now, bytes.
    pub fn budget(&self) -> u64 {
        self.budget
    }
    /// Live reads in the order the port serves them: `(read, aged, live grants, finished)`.
    pub fn reads_in_order(&self) -> Vec<(ReadKey, bool, u32, bool)> {
        self.order
            .iter()
            .map(|k| {
                let rk = self.key_of(*k);
                let r = self.read(rk).expect("ordered reads are live");
                (rk, r.port.aged, r.sched.live_grants(), r.sched.is_finished())
            })
            .collect()
    }
    /// The RTT estimate carried from read to read.
    pub fn rtt(&self) -> Option<&RttEstimator> {
        self.rtt.as_ref()
    }

    /// Checks the invariants of the [module docs](self).
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        let (mut out, mut stuck, mut late, mut senders, mut live) = (0, 0, 0, 0, 0);
        let (mut held, mut held_senders) = (0, 0);
        for (i, s) in self.slots.iter().enumerate() {
            let Some(r) = &s.read else { continue };
            live += 1;
            if r.outstanding != r.sched.outstanding() || r.senders != r.sched.live_senders() {
                return Err(InvariantViolation(format!("read in slot {i}: port view out of date")));
            }
            if r.stuck != r.sched.stuck_bytes() || r.stuck + r.late > r.outstanding {
                return Err(InvariantViolation(format!(
                    "read in slot {i}: {} stuck and {} late of {} outstanding, its scheduler says {} stuck",
                    r.stuck,
                    r.late,
                    r.outstanding,
                    r.sched.stuck_bytes()
                )));
            }
            // The port's copies of what the read's scheduler counts.
            let mirrors = |what: &str, ours: u64, its: u64| {
                if ours == its {
                    Ok(())
                } else {
                    Err(InvariantViolation(format!(
                        "read in slot {i}: {ours} {what} of {} outstanding, its scheduler says {its}",
                        r.outstanding
                    )))
                }
            };
            mirrors("late", r.late, r.sched.late_bytes())?;
            mirrors("held", r.held, r.sched.held_bytes())?;
            mirrors("senders held", r.held_senders.into(), r.sched.held_senders().into())?;
            out += r.outstanding;
            stuck += r.stuck;
            late += r.late;
            held += r.held;
            senders += r.senders;
            held_senders += r.held_senders;
            if !self.order.contains(&r.key) || r.key.2 != i as u32 {
                return Err(InvariantViolation(format!("read in slot {i} missing from the order")));
            }
            let rank = self.rank(r.start_steps, r.priority, r.block_len - r.completed);
            if r.key.0 != rank {
                return Err(InvariantViolation(format!(
                    "read in slot {i} ranked {} in the order, but its rank is {rank}",
                    r.key.0
                )));
            }
            r.sched.check_invariants()?;
        }
        if out != self.outstanding || senders != self.senders || held_senders != self.held_senders {
            return Err(InvariantViolation(format!(
                "port outstanding {} / senders {} ({} held) but reads sum to {out} / {senders} ({held_senders})",
                self.outstanding, self.senders, self.held_senders
            )));
        }
        if late != self.late {
            return Err(InvariantViolation(format!(
                "port late {} but reads sum to {late}",
                self.late
            )));
        }
        if stuck != self.stuck {
            return Err(InvariantViolation(format!(
                "port stuck {} but reads sum to {stuck}",
                self.stuck
            )));
        }
        if held != self.held {
            return Err(InvariantViolation(format!(
                "port held {} but reads sum to {held}",
                self.held
            )));
        }
        if self.order.len() != live {
            return Err(InvariantViolation(format!("{} ordered, {live} live", self.order.len())));
        }
        if self.budget < self.lowest_floor() || self.budget > self.config.max_budget {
            return Err(InvariantViolation(format!("budget {} out of bounds", self.budget)));
        }
        if self.hedge_tokens > self.config.hedge_burst {
            return Err(InvariantViolation(format!("hedge tokens {}", self.hedge_tokens)));
        }
        Ok(())
    }

    // ----- internals -----

    fn debug_check(&self) {
        #[cfg(debug_assertions)]
        if self.order.len() <= 64 {
            if let Err(e) = self.check_invariants() {
                panic!("{e}");
            }
        }
    }

    fn read(&self, rk: ReadKey) -> Option<&ReadState> {
        let s = self.slots.get(rk.slot as usize)?;
        (s.generation == rk.generation).then_some(s.read.as_ref()).flatten()
    }

    fn read_mut(&mut self, rk: ReadKey) -> Option<&mut ReadState> {
        let s = self.slots.get_mut(rk.slot as usize)?;
        if s.generation != rk.generation {
            return None;
        }
        s.read.as_mut()
    }

    fn key_of(&self, k: OrderKey) -> ReadKey {
        ReadKey {
            slot: k.2,
            generation: self.slots[k.2 as usize].generation,
        }
    }

    /// Time the bytes outstanding on the port take to arrive at its measured rate.
    fn ahead(&self) -> Duration {
        match self.rate {
            Some(r) if r > 0.0 => Duration::from_secs_f64(self.counted() as f64 / r),
            _ => Duration::ZERO,
        }
    }

    /// Bytes outstanding that count against the budget: all but the stuck ones and the late
    /// and held ones, of which at most a budget's worth (see "Late grants leave the budget"
    /// and "A slow store is not a stall").
    fn counted(&self) -> u64 {
        let late = self.late.min(self.budget);
        let held = match self.link_rate() {
            Some(r) if r > 0.0 => self.held.min(self.held_credit),
            _ => self.held.min(self.budget - late),
        };
        self.outstanding - self.stuck - late - held
    }

    /// A grant of new bytes just issued (before [`Receiver::sync`] counts it), whose server
    /// is expected to hold it `hold`: the part of it past the room the budget alone left
    /// took the spare credit ([`Receiver::spare_credit`]). A grant its store holds spends
    /// that credit by being held (the held bytes grow); one that is not held spends it here,
    /// or it would leave the credit whole for the next grant, and the next, without end (see
    /// "Spare credit is for grants the stores hold" in the module docs). O(1), and nothing
    /// to do where no spare credit applies.
    fn spend_spare_credit(&mut self, a: &Action, hold: Option<Duration>) {
        let Action::Request(g) = a else { return };
        if matches!(g.kind, crate::GrantKind::Hedge | crate::GrantKind::Retry)
            || hold.is_some_and(|h| h >= STORE_HOLD)
            || self.store_port_rate().is_none()
        {
            return;
        }
        let budget_room = match self.counted() {
            0 => return,
            c => self.budget.saturating_sub(c),
        };
        self.held_credit = self.held_credit.saturating_sub(g.len.saturating_sub(budget_room));
    }

    /// Credit that held bytes do not use, where the port's servers hold their answers
    /// ([`SPARE_CREDIT_HOLD`] or more lately) and the port's rate is known; 0 elsewhere. A
    /// new grant may take it beside the budget's room: its server is expected to hold it
    /// too, and the bytes the stores released and the port still carries must not stop the
    /// stores' next grants (see "Released bytes do not stop the next grants" in the module
    /// docs).
    fn spare_credit(&self) -> u64 {
        match self.store_port_rate() {
            Some(_) => self.held_credit.saturating_sub(self.held),
            None => 0,
        }
    }

    /// When a port blocked at `now` looks again for the credit of held bytes it may still
    /// fill (see "The credit fills between events" in the module docs): where the spare
    /// credit applies and the credit is under its cap, once it grew by the largest chunk a
    /// grant may take: [`CREDIT_WAKE`] at the soonest, [`PORT_SILENCE`] at the latest.
    /// `None` elsewhere: the next event frees the room, as before.
    fn credit_wake_at(&self, now: Instant) -> Option<Instant> {
        let rate = self.store_port_rate()?;
        if self.held_credit >= self.credit_cap() {
            return None;
        }
        let chunk = self.max_chunk() as f64;
        // At most the silence bound: a rate measured absurdly low must not overflow.
        let wait = Duration::try_from_secs_f64(chunk / rate).unwrap_or(PORT_SILENCE);
        now.checked_add(wait.clamp(CREDIT_WAKE, PORT_SILENCE))
    }

    /// The port's rate where its servers hold their answers [`SPARE_CREDIT_HOLD`] or more
    /// lately and that rate is known: where the spare credit and the pace of held answers
    /// apply (`None` elsewhere).
    fn store_port_rate(&self) -> Option<f64> {
        self.port_hold.filter(|&h| h >= SPARE_CREDIT_HOLD)?;
        self.link_rate().filter(|&r| r > 0.0)
    }

    /// Whether a new sender, held by its store as the port's servers were lately, would
    /// start sending only after the servers sending now are done: where the spare credit
    /// applies, the bytes counted now fit the budget and drain at the port's rate within
    /// [`HELD_SENDER_SHARE`] of the port's hold (see "A sender its store holds is not
    /// sending yet" in the module docs).
    /// `counted`: [`Receiver::counted`], which the caller has at hand.
    fn senders_done_within_hold(&self, counted: u64) -> bool {
        let (Some(rate), Some(hold)) = (self.store_port_rate(), self.port_hold) else {
            return false;
        };
        counted <= self.budget && (counted as f64) < rate * hold.as_secs_f64() * HELD_SENDER_SHARE
    }

    /// The most the credit of held bytes holds: the held bytes plus what the budget leaves
    /// beside the late ones (see "Bytes in a store are not in the port" in the module docs).
    fn credit_cap(&self) -> u64 {
        self.held + self.budget.saturating_sub(self.late)
    }

    /// The largest chunk a grant may take: half the budget, at least [`MIN_CHUNK`].
    fn max_chunk(&self) -> u64 {
        (self.budget / MIN_GRANTS_PER_BUDGET).max(MIN_CHUNK)
    }

    /// Refills the credit of held bytes at the port's rate (see "Bytes in a store are not in
    /// the port" in the module docs): it grows by the bytes the port passes meanwhile, to at
    /// most the held bytes plus what the budget leaves beside the late ones.
    fn refill_credit(&mut self, now: Instant) {
        let room = self.credit_cap();
        let add = match (self.link_rate(), self.credit_at) {
            (Some(r), Some(t)) if r > 0.0 => (r * now.saturating_duration_since(t).as_secs_f64()) as u64,
            _ => 0,
        };
        self.held_credit = self.held_credit.saturating_add(add).min(room);
        self.credit_at = Some(now);
    }

    /// When the port, silent since its last sign of life, would stop counting the bytes
    /// outstanding (`None`: nothing counted is outstanding).
    fn silence_deadline(&self) -> Option<Instant> {
        // Bytes held by slow stores are expected to be silent (see "A slow store is not a
        // stall"): a port with no other bytes counted is waiting, not silent.
        if self.counted() == 0 || self.outstanding <= self.held + self.stuck {
            return None;
        }
        self.alive_at.map(|t| t + PORT_SILENCE)
    }

    /// Past the silence deadline, every read's outstanding bytes stop counting until that
    /// read delivers a byte (see "A silent server" in the module docs).
    fn discount_silence(&mut self, now: Instant) {
        if self.silence_deadline().is_none_or(|d| now < d) {
            return;
        }
        let (mut stuck, mut late, mut held) = (0, 0, 0);
        for r in self.slots.iter_mut().filter_map(|s| s.read.as_mut()) {
            r.sched.mark_stuck();
            r.stuck = r.sched.stuck_bytes();
            r.late = r.sched.late_bytes();
            r.held = r.sched.held_bytes();
            r.held_senders = 0;
            stuck += r.stuck;
            late += r.late;
            held += r.held;
        }
        self.stuck = stuck;
        self.late = late;
        self.held = held;
        self.held_senders = 0;
        self.alive_at = Some(now);
        self.stats.stuck_discounts += 1;
    }

    fn gate(&self, now: Instant) -> Gate {
        let counted = self.counted();
        let ours = self.queue_is_ours();
        let lossy = self.is_lossy(now);
        let room = if counted == 0 {
            u64::MAX
        } else {
            self.budget.saturating_sub(counted) + self.spare_credit()
        };
        Gate {
            room,
            // Servers waiting on their stores send nothing yet: they leave the cap, as held
            // bytes leave the budget, bounded by the credit, and a new one passes it while
            // those sending now will be done before it sends (see "A slow store is not a
            // stall" in the module docs).
            new_sender: self.senders == 0
                || self.senders - self.held_senders < self.config.max_senders
                || self.senders_done_within_hold(counted),
            hedge_room: self.hedge_tokens,
            ahead: self.ahead(),
            grant: match self.link_rate() {
                Some(r) => ((r * GRANT_TIME.as_secs_f64()) as u64).min(self.budget / GRANTS_PER_BUDGET),
                None => 0,
            },
            max_chunk: self.max_chunk(),
            whole_rest: self.budget / MIN_GRANTS_PER_BUDGET,
            timeout_scale: self.timeout_scale,
            // Stalls are judged in `handle_timeout_of` only.
            escalate_within: None,
            late_after: self.late_after_when(ours),
            // Spreading is for a port that other traffic keeps full; where the queue is the
            // reads' own, their losses are their own overflow and the budget answers them.
            spread_chunk: (lossy && !ours).then(|| (self.budget / SPREAD_GRANTS_PER_BUDGET).max(MIN_CHUNK)),
            // A read alone on a port that reports no loss may take the room in one grant (see
            // `next_len`): a larger grant is a larger burst from its server.
            lone: self.order.len() == 1 && !lossy,
            budget: self.budget,
        }
    }

    /// How long a grant may go without progress past its expected arrival before its bytes
    /// stop counting (see "Late grants leave the budget"): [`LATE_AFTER_RTTS`] smoothed
    /// first-byte times, at least [`MIN_LATE_AFTER`], while the queue is not the receiver's
    /// own; `None` otherwise.
    fn late_after(&self) -> Option<Duration> {
        self.late_after_when(self.queue_is_ours())
    }

    /// [`Self::late_after`] with whose queue it is already asked (`ours`): the gate asks it
    /// once for this and for spreading.
    fn late_after_when(&self, ours: bool) -> Option<Duration> {
        if ours {
            return None;
        }
        let srtt = self.srtt?;
        Some((srtt * LATE_AFTER_RTTS).max(MIN_LATE_AFTER))
    }

    /// Refills the hedge bucket with time: the hedge fraction of the port's measured rate
    /// (or its rate hint). Filling it only from granted bytes let one server that never
    /// answers drain it for good when reads are small: every later read waited for its
    /// deadline (a CI run of the QUIC fallback test). With time, hedges stay within the
    /// fraction of the port's capacity, which is the cap's purpose, and a stuck read always
    /// gets its hedge within `hedge_burst / (fraction * rate)` (40 ms at 1 Gbit/s).
    fn refill_hedges(&mut self, now: Instant) {
        let last = *self.hedge_refilled.get_or_insert(now);
        let Some(rate) = self.rate else { return };
        let dt = now.saturating_duration_since(last).as_secs_f64();
        let fill = (rate * self.config.hedge_fraction * dt) as u64;
        if fill > 0 {
            self.hedge_tokens = self.hedge_tokens.saturating_add(fill).min(self.config.hedge_burst);
            self.hedge_refilled = Some(now);
        }
    }

    /// Moves the clock of aging to `now` at the port's rate as the receiver knows it (the
    /// hint, else its measurement, else [`AGING_REFERENCE_RATE`]) and returns it.
    fn tick_aging_clock(&mut self, now: Instant) -> f64 {
        match self.aging_clock_at {
            Some(at) if now > at => {
                let rate = self.link_rate().filter(|r| r.is_finite() && *r > 0.0);
                let dt = now.duration_since(at).as_secs_f64();
                self.aging_clock += dt * rate.unwrap_or(AGING_REFERENCE_RATE);
                self.aging_clock_at = Some(now);
            }
            Some(_) => {}
            None => self.aging_clock_at = Some(now),
        }
        self.aging_clock
    }

    /// The clock of aging: the bytes the port could have passed since the receiver's first
    /// read, time times the port's rate as the receiver knew it along the way (see "Aging
    /// halves a read's size per aging bound" in the module docs). A read goes before the
    /// reads of its priority that start when this is more than the aging bound times
    /// `log2(its bytes left / theirs)` past its own start.
    pub fn aging_clock(&self) -> f64 {
        self.aging_clock
    }

    /// Marks the reads that started more than the aging bound ago (on the clock of aging)
    /// as aged (reported in [`PortReport::aged`]; their place in the order moves with the
    /// clock by itself, see [`Self::rank`]).
    fn age(&mut self, now: Instant) {
        let clock = self.tick_aging_clock(now);
        while let Some(&(started, rk)) = self.arrivals.front() {
            if clock - started < self.config.aging_bytes as f64 {
                break;
            }
            self.arrivals.pop_front();
            if let Some(r) = self.read_mut(rk) {
                r.port.aged = true;
            }
        }
    }

    /// A read's place in the port's order, smallest first: its start (the clock of aging
    /// then) in steps of [`RANK_STEPS`] per aging bound, plus the base-2 logarithm of its
    /// bytes left in steps of [`RANK_STEPS`] per halving, plus [`PRIORITY_AGING_BOUNDS`] aging
    /// bounds per level of priority under the highest. Each read's priority when the clock
    /// reads `c` would be its bytes left halved once per aging bound of `c` past its start:
    /// the order between two reads does not depend on `c`, so it is kept sorted and only a
    /// read's progress moves it. With no aging bound, every rank is 0 and the arrival number
    /// orders the reads.
    fn rank(&self, start_steps: u64, priority: u8, left: u64) -> u64 {
        if self.config.aging_bytes == 0 {
            return 0;
        }
        let halvings = ((left.max(1) as f64).log2() * RANK_STEPS as f64) as u64;
        let lower = u64::from(255 - priority) * PRIORITY_AGING_BOUNDS * RANK_STEPS;
        start_steps + halvings + lower
    }

    /// Brings the port's view of read `rk` up to date after an event.
    fn sync(&mut self, now: Instant, rk: ReadKey) {
        let budget = self.budget;
        let Some(r) = self.read_mut(rk) else { return };
        let (out, senders) = (r.sched.outstanding(), r.sched.live_senders());
        let completed = r.sched.completed_bytes();
        let st = r.sched.stats();
        let hedged = st.hedged_bytes - r.hedged;
        let stalls = r.sched.port_stalls() - r.stalls;
        let verdicts = r.sched.take_hedge_verdicts();
        let done = completed - r.completed;
        // A fragment's length learnt from its server shrinks the read (SRPT's key).
        let shrunk = r.sched.block_len() != r.block_len;
        r.block_len = r.sched.block_len();
        let (old_out, old_senders, old_held_senders) = (r.outstanding, r.senders, r.held_senders);
        // Stuck grants that progressed or ended count again, or no longer at all; the
        // stalls of stuck grants are not the port's congestion (`stalls` leaves them out).
        let stuck = r.sched.stuck_bytes();
        let old_stuck = std::mem::replace(&mut r.stuck, stuck);
        let late = r.sched.late_bytes();
        let old_late = std::mem::replace(&mut r.late, late);
        let held = r.sched.held_bytes();
        let old_held = std::mem::replace(&mut r.held, held);
        let released_total = r.sched.released_bytes();
        let released = released_total - std::mem::replace(&mut r.released, released_total);
        r.outstanding = out;
        r.senders = senders;
        r.held_senders = r.sched.held_senders();
        let held_senders = r.held_senders;
        r.completed = completed;
        r.hedged = st.hedged_bytes;
        r.stalls = r.sched.port_stalls();
        let store_stalls = r.sched.store_stalls() - std::mem::replace(&mut r.store_stalls, r.sched.store_stalls());
        let has_cancels = r.sched.has_cancels();
        let has_urgent = r.sched.has_urgent();
        // Admission wait: time with nothing outstanding while unfinished; transfer: time
        // with something outstanding.
        let finished = r.sched.is_finished();
        let idle = r.sched.live_grants() == 0 && !finished;
        let active = r.sched.live_grants() > 0 && !finished;
        if let Some(t) = r.waiting_since.filter(|_| !idle) {
            r.port.admission_wait += now.saturating_duration_since(t);
            r.waiting_since = None;
        }
        if let Some(t) = r.active_since.filter(|_| !active) {
            r.port.transfer += now.saturating_duration_since(t);
            r.active_since = None;
        }
        if idle && r.waiting_since.is_none() {
            r.waiting_since = Some(now);
        }
        if active && r.active_since.is_none() {
            r.active_since = Some(now);
        }
        r.port.budget_min = r.port.budget_min.min(budget);
        r.port.budget_max = r.port.budget_max.max(budget);
        let (start_steps, priority, left) = (r.start_steps, r.priority, r.block_len - completed);
        let old_key = r.key;
        let rekey = done > 0 || shrunk;
        self.outstanding = self.outstanding - old_out + out;
        self.stuck = self.stuck - old_stuck + stuck;
        self.late = self.late - old_late + late;
        self.held = self.held - old_held + held;
        // On a lossy port, bytes the stores released spent their credit (see "Bytes in a
        // store are not in the port").
        if self.is_lossy(now) {
            self.held_credit = self.held_credit.saturating_sub(released);
        }
        self.refill_credit(now);
        self.senders = self.senders - old_senders + senders;
        self.held_senders = self.held_senders - old_held_senders + held_senders;
        self.hedge_tokens = self.hedge_tokens.saturating_sub(hedged);
        if rekey {
            let rank = self.rank(start_steps, priority, left);
            if rank != old_key.0 {
                let new_key = (rank, old_key.1, old_key.2);
                self.order.remove(&old_key);
                self.order.insert(new_key);
                self.read_mut(rk).expect("synced read is live").key = new_key;
            }
        }
        if has_cancels {
            self.cancels.push_back(rk);
        }
        if has_urgent && self.urgent.back() != Some(&rk) {
            self.urgent.push_back(rk);
        }
        // Spurious hedges say the timeouts they ran under were too short for this path (its
        // scheduling noise, its queues): twice that; a won hedge says they were right: half
        // of that. Both steps multiply, so the multiplier follows the ratio of spurious to won
        // hedges, and hedges that ran under one multiplier move it once (see "Timeouts learn
        // from spurious hedges" in the module docs).
        if let Some(s) = verdicts.spurious {
            self.timeout_scale = self.timeout_scale.max(s.saturating_mul(2)).min(MAX_TIMEOUT_SCALE);
        } else if let Some(s) = verdicts.won {
            self.timeout_scale = self.timeout_scale.min((s / 2).max(1));
        }
        self.stats.store_stalls += store_stalls;
        if stalls > 0 && (self.slow_start || self.is_lossy(now)) {
            // A stall is a response that saw loss (or worse) for the loss share: in slow
            // start (the budget has not met the port yet, and the stall may be the first
            // overflow's lost tail) and while servers report loss.
            self.stats.stall_decreases += stalls;
            self.ends += stalls;
            self.lossy += stalls;
            self.loss_window(now);
        } else {
            // Otherwise the stall is the host's (its CPU, a slow server), not the port's
            // buffer (see "Stalls count where loss is reported").
            self.stats.quiet_stalls += stalls;
        }
        if done > 0 && (self.slow_start || self.hold_until.is_none_or(|t| now >= t)) {
            self.grow(now, done);
        }
    }

    /// A first byte of `server` on an idle connection came `hold` after its request
    /// reached the server (see "A slow store is not a stall" in the module docs): a lower
    /// hold replaces the one learnt, a higher one moves it half-way up.
    fn learn_hold(&mut self, server: ServerId, hold: Duration) {
        if self.holds.len() >= MAX_LEARNT_HOLDS && !self.holds.contains_key(&server) {
            self.holds.clear();
        }
        let step = |h: Duration| if hold <= h { hold } else { h + (hold - h) / 2 };
        let h = self.holds.entry(server).or_insert(hold);
        *h = step(*h);
        self.port_hold = Some(self.port_hold.map_or(hold, step));
    }

    /// A grant just issued to a server whose store has held its answers lately is not
    /// expected before that hold (see "A slow store is not a stall" in the module docs).
    /// Returns the hold expected of it (`None` while the port learnt none).
    fn expect_hold(&mut self, now: Instant, rk: ReadKey, a: &Action) -> Option<Duration> {
        let Action::Request(g) = a else { return None };
        // Every grant passes here: no hash of its server while no hold was learnt (a port
        // whose servers answer at once, or whose transport reports no hold).
        let port_hold = self.port_hold?;
        // A server not learnt yet (or any server, once the table was cleared at its bound)
        // is expected to hold as the port's servers have lately: where every store is slow,
        // a new server's first grant stalled at its path timer, and in slow start that
        // stall counted as loss and ended it.
        let hold = self.holds.get(&g.server).copied().unwrap_or(port_hold);
        if let Some(r) = self.read_mut(rk) {
            r.sched.expect_by(now, g.id, now + hold, hold >= STORE_HOLD);
        }
        Some(hold)
    }

    /// A clean first-byte time `s`, of which `host` was the hosts' (see
    /// [`Receiver::on_bytes_timed`] and *Host time is not the port's queue* in the module
    /// docs). The whole time sets the smoothed RTT and judges competition, over its own
    /// base; less the client's wait it sets the base of the growth cap; less both hosts'
    /// time, over the path's own base, it is the queue the delay rules read.
    fn on_sample(&mut self, now: Instant, rk: ReadKey, s: Duration, host: HostTime) {
        let base = match self.base_rtt {
            Some((b, at)) if b <= s && now < at + BASE_RTT_WINDOW => b,
            _ => {
                self.base_rtt = Some((s, now));
                s
            }
        };
        self.srtt = Some(smoothed(self.srtt, s));
        let round_trip = s - base;
        let served = s.saturating_sub(host.client);
        if self
            .served_base
            .is_none_or(|(b, at)| served < b || now >= at + BASE_RTT_WINDOW)
        {
            self.served_base = Some((served, now));
        }
        if host.server_capped {
            // The server held it longer than it could say: the rest is not the path's, and
            // a store's jitter read as a queue would hold the budget at every sample. Where
            // the store's part, carried in full, covers the cap, the sample less the store's
            // part is the path's round trip (and the host's own time past the store's),
            // which sizes the port's rate samples (see *A hold past the transport's cap*).
            if let Some(store) = host.store.filter(|&st| st >= host.server) {
                self.path_srtt = Some(smoothed(self.path_srtt, served.saturating_sub(store)));
            }
            return;
        }
        let path = served.saturating_sub(host.server);
        let own = host.server.saturating_sub(host.store.unwrap_or_default());
        self.host_srtt = Some(smoothed(self.host_srtt, own));
        self.path_srtt = Some(smoothed(self.path_srtt, path));
        let path_base = match self.path_base {
            Some((b, at)) if b <= path && now < at + BASE_RTT_WINDOW => b,
            _ => {
                self.path_base = Some((path, now));
                path
            }
        };
        let delay = path - path_base;
        if let Some(r) = self.read_mut(rk) {
            r.port.delay_samples += 1;
            r.delay_sum += delay;
            r.host_sum += s - path;
            r.port.delay_max = r.port.delay_max.max(delay);
        }
        if std::mem::take(&mut self.empty_port_armed) {
            self.empty_port_delays.push(round_trip);
            self.empty_port_at = Some(now);
        }
        self.judge_competition(now, round_trip);
        let target = self.target(now);
        if !self.queue_is_ours() {
            if delay > target {
                self.stats.foreign_delays += 1;
            }
            return;
        }
        self.peak_delay = self.peak_delay.max(delay);
        if delay <= target {
            return;
        }
        // Above the target the budget stops growing for a round trip; only far above it (a
        // queue the port cannot hold) does it shrink.
        self.stats.delay_holds += 1;
        self.hold_until = Some(now + self.srtt.unwrap_or(target));
        // Severe is judged against the configured target: a learnt one is a buffer's size,
        // not a sign of how much delay the path can take.
        let severe = self.config.target_delay;
        if delay > severe * SEVERE_DELAY_FACTOR && !self.past_own_queue(delay) {
            let excess = (delay - severe).as_secs_f64() / delay.as_secs_f64();
            let f = (1.0 - BETA * excess).max(1.0 - MAX_DECREASE);
            // Delay alone never takes the budget under the configured floor: a slow port's
            // floor queues past the target without overflowing (see "A floor that follows
            // the path").
            if self.decrease(now, f, self.config.min_budget) {
                self.stats.delay_decreases += 1;
            }
        }
    }

    /// Starts competing after [`COMPETE_SAMPLES`] consecutive delay samples over
    /// [`COMPETE_DELAY_FACTOR`] configured targets taken with the budget near its floor
    /// ([`COMPETE_FLOOR_FACTOR`]) or longer than the whole budget could queue
    /// (`beyond_own_budget`), and stops after as many at or under it (see "A deep queue of
    /// other traffic" in the module docs). A sample over the threshold that is neither
    /// leaves the count as it is. Where the floor's own queue takes [`SLOW_PORT_MARGIN`]
    /// times the threshold to drain ([`Self::floor_queue_passes_threshold`]) and the empty
    /// port's last delays say it holds no standing queue ([`Self::port_drains`]), the
    /// receiver does not compete; nor where the port's counter says the reads take at
    /// least [`CEILING_RATE_SHARE`] of its bytes (see "The port's counter").
    fn judge_competition(&mut self, now: Instant, delay: Duration) {
        // A standing queue of other traffic needs other traffic: where the port's counter
        // says the reads take CEILING_RATE_SHARE of its bytes or more, the queue is theirs.
        if self.counter_share().is_some_and(|s| s >= CEILING_RATE_SHARE) {
            self.floor_over = 0;
            self.competing = false;
            return;
        }
        let slow = self.floor_queue_passes_threshold();
        if slow && self.port_drains(now) {
            self.floor_over = 0;
            self.competing = false;
            return;
        }
        if delay <= self.config.target_delay * COMPETE_DELAY_FACTOR {
            self.floor_over = 0;
            self.under = self.under.saturating_add(1);
            if self.under >= COMPETE_SAMPLES {
                self.competing = false;
            }
            return;
        }
        self.under = 0;
        // Near the floor only counts once a decrease brought the budget there: in slow start
        // it sits low because it started there (see "The start" in the module docs).
        let near_floor = !self.slow_start && self.budget <= self.config.min_budget.saturating_mul(COMPETE_FLOOR_FACTOR);
        if !near_floor && !self.beyond_own_budget(delay) {
            return;
        }
        self.floor_over = self.floor_over.saturating_add(1);
        if self.floor_over >= COMPETE_SAMPLES && !self.competing {
            self.competing = true;
            self.stats.competing_entries += 1;
        }
    }

    /// Whether the budget's floor, outstanding, queues longer than [`SLOW_PORT_MARGIN`] times
    /// the competing threshold ([`COMPETE_DELAY_FACTOR`] targets) at the port's rate: on such
    /// a slow port (a 16 KiB floor under about 164 Mbit/s with the default target) the reads'
    /// own queue near the floor looks like another's. False until the port's rate is known.
    fn floor_queue_passes_threshold(&self) -> bool {
        let threshold = (self.config.target_delay * COMPETE_DELAY_FACTOR).as_secs_f64();
        self.link_rate()
            .is_some_and(|l| l > 0.0 && self.config.min_budget as f64 / l > SLOW_PORT_MARGIN * threshold)
    }

    /// Whether the median of the last [`EMPTY_PORT_SAMPLES`] delays of grants issued on an
    /// empty port (at least two, the newest within [`BASE_RTT_WINDOW`]) is at or under
    /// [`COMPETE_DELAY_FACTOR`] targets: without the receiver's bytes the port holds no
    /// standing queue, so a long queue its other grants see is their own (see "A slow port
    /// is not a deep queue" in the module docs). Two at least: the first sample sets the
    /// base RTT, so its delay is zero whatever the queue.
    fn port_drains(&self, now: Instant) -> bool {
        let threshold = self.config.target_delay * COMPETE_DELAY_FACTOR;
        if self.empty_port_at.is_none_or(|t| now >= t + BASE_RTT_WINDOW) {
            return false;
        }
        // The median of those taken (the upper of two), at least two.
        self.empty_port_delays.taken() >= 2 && self.empty_port_delays.median(true).is_some_and(|m| m <= threshold)
    }

    /// Whether a delay sample is longer than the whole budget could queue at the port's
    /// rate, plus the competing threshold, while the reads take under [`OWN_QUEUE_SHARE`] of
    /// that rate: a queue the receiver's own bytes cannot have built, whatever its budget
    /// (see "A deep queue of other traffic" in the module docs). False until the port's
    /// rate is known.
    fn beyond_own_budget(&self, delay: Duration) -> bool {
        if self.takes_share(OWN_QUEUE_SHARE) {
            return false;
        }
        let own = match self.link_rate() {
            Some(l) if l > 0.0 => self.budget as f64 / l,
            _ => return false,
        };
        delay.as_secs_f64() > own + (self.config.target_delay * COMPETE_DELAY_FACTOR).as_secs_f64()
    }

    /// Whether a delay is more than [`SLOW_PORT_MARGIN`] times as long as the port's rate
    /// takes to drain every byte the receiver has there (those outstanding and not held by
    /// a slow store, or the budget if more): a queue its own grants cannot have built,
    /// whatever else built it, so no severe-delay decrease (see "Queueing delay" in the
    /// module docs). False until the port's rate is known.
    fn past_own_queue(&self, delay: Duration) -> bool {
        let bytes = (self.outstanding - self.held).max(self.budget) as f64;
        self.link_rate()
            .is_some_and(|l| l > 0.0 && delay.as_secs_f64() > SLOW_PORT_MARGIN * bytes / l)
    }

    /// Samples the delivery rate over intervals of at least [`RATE_INTERVAL`] (and one
    /// smoothed RTT) while bytes are outstanding; a smoothed (1/8) average.
    fn sample_rate(&mut self, now: Instant) {
        let Some((t0, d0)) = self.rate_window else {
            self.rate_window = Some((now, self.delivered));
            return;
        };
        let span = now.saturating_duration_since(t0);
        if span < RATE_INTERVAL.max(self.srtt.unwrap_or_default()) {
            return;
        }
        if self.outstanding > 0 {
            let r = (self.delivered - d0) as f64 / span.as_secs_f64();
            let smoothed = match self.rate {
                None => r,
                Some(x) => x * 0.875 + r * 0.125,
            };
            self.rate = Some(smoothed);
            self.max_smoothed_rate = Some(windowed_max(self.max_smoothed_rate, smoothed, now));
        }
        self.rate_window = Some((now, self.delivered));
    }

    /// Adds `n` bytes that arrived at `now` to the busy-time sample of the port's rate, with
    /// the time since the last arrival, if bytes were outstanding all along (else the port
    /// may have idled: `now` begins a busy period) and the busy period began at least one
    /// smoothed RTT and [`RATE_SAMPLE_SKIP`] before that arrival (bytes that may have waited
    /// before it: a token bucket's burst, a coalesced interrupt); takes the sample once it
    /// spans [`RATE_SAMPLE_SPAN`] and [`RATE_SAMPLE_RTTS`] smoothed RTTs of busy time (see
    /// "The port's rate" in the module docs).
    fn sample_port_rate(&mut self, now: Instant, n: u64) {
        if n == 0 {
            return;
        }
        match self.busy_last {
            Some((last, true)) if self.busy_since.is_some() => {
                if self.busy_settled_by(last) {
                    let srtt = self.rate_rtt();
                    self.own_rate.add(now, now.saturating_duration_since(last), n, srtt);
                }
            }
            _ => self.busy_since = Some(now),
        }
        if self.counter_busy_since.is_none() || !self.counter_busy(now) {
            self.counter_busy_since = Some(now);
        }
        // Busy while bytes are due: a port whose bytes all wait in their servers' stores
        // idles (see "A slow store is not a stall").
        self.busy_last = Some((now, self.outstanding > self.held));
    }

    /// Whether the port's busy period goes on at `now` as its counter sees it: bytes
    /// outstanding after the last arrival and still now, or the last arrival at most
    /// [`COUNTER_GAP_RTTS`] smoothed RTTs ago (a grant's replacement on its way).
    fn counter_busy(&self, now: Instant) -> bool {
        self.busy_last.is_some_and(|(last, out)| {
            (out && self.outstanding > self.held)
                || now.saturating_duration_since(last) <= self.sample_srtt() * COUNTER_GAP_RTTS
        })
    }

    /// The smoothed RTT that sizes the busy-time samples ([`RATE_INTERVAL`] before one).
    fn sample_srtt(&self) -> Duration {
        self.srtt.unwrap_or(RATE_INTERVAL)
    }

    /// Whether the port's busy period began at least one smoothed RTT and
    /// [`RATE_SAMPLE_SKIP`] before `at`: busy time from then on holds no token bucket's
    /// burst after an idle port (the rule both kinds of busy-time sample follow).
    fn busy_settled_by(&self, at: Instant) -> bool {
        self.busy_since.is_some_and(|since| since + self.busy_skip() <= at)
    }

    /// What a busy period's start leaves out of the port's rate: one smoothed RTT, and at
    /// least [`RATE_SAMPLE_SKIP`].
    fn busy_skip(&self) -> Duration {
        self.rate_rtt().max(RATE_SAMPLE_SKIP)
    }

    /// The round trip that sizes the port's rate samples and what a busy period's start
    /// leaves out: the path's smoothed round trip, the hosts' time out ([`RATE_INTERVAL`]
    /// before one). With the servers' hold in it, a port whose servers take 100 ms to answer
    /// skipped the first 100 ms of every busy period, longer than any of them, and took
    /// no sample (see "A slow store is not a stall"). A hold past the transport's cap comes
    /// out as its store's part where the transport carried that (see *A hold past the
    /// transport's cap*); else the smoothed RTT stands in, the hold in it.
    fn rate_rtt(&self) -> Duration {
        self.path_srtt.or(self.srtt).unwrap_or(RATE_INTERVAL)
    }

    /// The port's rate as far as this receiver knows: the user's hint, else the largest
    /// median of the port's receive counter's samples lately once it took
    /// [`RATE_SAMPLE_MEDIAN`] samples, else the largest median of busy-time samples of its
    /// own bytes lately (before the first, the largest smoothed delivery rate), raised to
    /// the counter's where that is higher.
    fn link_rate(&self) -> Option<f64> {
        if let Some(b) = self.config.port_rate_bps {
            return Some(b as f64 / 8.0);
        }
        let own = self
            .own_rate
            .max
            .or(self.max_smoothed_rate)
            .map(|(m, _)| m)
            .or(self.rate);
        // Until the counter has a median of RATE_SAMPLE_MEDIAN samples it only raises what
        // the reads' own bytes say: a first sample of it taken over a stall must not stand
        // for the port. From then on it is the port's rate: the reads' own bytes are a part
        // of the port's, and a client late to read them counts bytes that passed before.
        let counted = self.counter_rate.samples.taken() >= RATE_SAMPLE_MEDIAN;
        match (own, self.counter_rate.max) {
            (_, Some((b, _))) if counted => Some(b),
            (Some(a), Some((b, _))) => Some(a.max(b)),
            (a, b) => a.or(b.map(|(m, _)| m)),
        }
    }

    /// A grant's pace, if any: a held answer's on a lossy port (see
    /// [`Receiver::held_answer_pace`]); else, with pacing on, [`PACING_GAIN`] times the port's
    /// rate times its share of the bytes outstanding now that it is issued. Every grant in
    /// flight then ends about when the bytes ahead of it have drained at the port's rate,
    /// and together they arrive at about that rate instead of at each sender's line rate.
    /// `hold`: the hold [`Receiver::expect_hold`] expected of the grant.
    fn set_pace(&self, now: Instant, hold: Option<Duration>, a: &mut Action) {
        let Action::Request(g) = a else { return };
        if let Some(pace) = self.held_answer_pace(now, hold, g) {
            g.pace = Some(pace);
            return;
        }
        if !self.config.pacing {
            return;
        }
        if let Some(link) = self.link_rate() {
            let share = g.len as f64 / self.outstanding.max(g.len).max(1) as f64;
            g.pace = Some(((PACING_GAIN * link * share) as u64).max(1));
        }
    }

    /// The pace of grant `g` if its server is expected to hold it `hold`, [`STORE_HOLD`] or
    /// more, the port's servers hold their answers [`SPARE_CREDIT_HOLD`] or more lately,
    /// the port's rate is known and the port is lossy ([`Receiver::is_lossy`]):
    /// [`PACING_GAIN`] times the grant's bytes over [`HELD_ANSWER_SPREAD`] of that hold, or
    /// over the time the budget takes to drain at the port's rate if that is shorter, at
    /// most that gain times the port's rate (see "Held answers are paced on a lossy port"
    /// in the module docs).
    fn held_answer_pace(&self, now: Instant, hold: Option<Duration>, g: &crate::Grant) -> Option<u64> {
        let hold = hold.filter(|&h| h >= STORE_HOLD)?;
        let link = self.store_port_rate()?;
        if !self.is_lossy(now) {
            return None;
        }
        // A paced answer counts against the budget while it trickles in: no longer than
        // the budget takes to drain at the port's rate, so the budget still carries it.
        let spread = (hold.as_secs_f64() * HELD_ANSWER_SPREAD)
            .min(self.budget as f64 / link)
            .max(g.len as f64 / link);
        Some(((PACING_GAIN * g.len as f64 / spread) as u64).max(1))
    }

    /// Whether a queue the receiver measures is one its own grants built: it is not
    /// competing with a standing queue of other traffic, and it takes at least
    /// [`OWN_QUEUE_SHARE`] of the port's rate. Below that, the queue belongs to traffic the
    /// receiver does not grant (bulk flows through the same port); holding growth for it
    /// would hand those flows the port (Copa's competitive mode makes the same call).
    fn queue_is_ours(&self) -> bool {
        !self.competing && self.takes_share(OWN_QUEUE_SHARE)
    }

    /// Whether the receiver takes at least `share` of the port: of the bytes the port's
    /// counter counted lately, where there is one (see "The port's counter" in the module
    /// docs); else its smoothed delivery rate against the port's rate (true until both are
    /// known).
    fn takes_share(&self, share: f64) -> bool {
        if let Some(s) = self.counter_share() {
            return s >= share;
        }
        match (self.rate, self.link_rate()) {
            (Some(r), Some(l)) if l > 0.0 => r >= share * l,
            _ => true,
        }
    }

    /// Multiplies the budget by `f`, never under `floor` (nor lifting it to a floor above
    /// it), at most once per smoothed RTT. Returns whether it did.
    fn decrease(&mut self, now: Instant, f: f64, floor: u64) -> bool {
        if !self.config.adaptive {
            return false;
        }
        let spacing = self.srtt.unwrap_or(Duration::from_micros(100));
        if self.last_decrease.is_some_and(|t| now < t + spacing) {
            return false;
        }
        self.last_decrease = Some(now);
        // A floor that rose over the budget (another flow came) does not lift it: growth does.
        let floor = floor.min(self.budget);
        let was = self.budget;
        self.budget = ((self.budget as f64 * f) as u64).clamp(floor, self.config.max_budget.max(floor));
        // Slow start ends where a decrease finds the port's edge: a budget at its floor
        // found none (its bytes cannot have overflowed a buffer that holds the floor), and
        // ending it there left the budget to grow by a chunk per round trip from its first
        // stall on (see "Growth" in the module docs).
        if self.budget < was {
            self.slow_start = false;
        }
        true
    }

    /// The floor of a loss decrease: the configured one, or, where it follows the path and
    /// the loss is one the reads' own budget caused (the queue is theirs and they take at
    /// least [`CEILING_RATE_SHARE`] of the port, as for a ceiling learnt from loss), the
    /// port's bandwidth-delay product plus the configured target queue within
    /// [`MIN_PATH_FLOOR`] and the configured floor (see "A floor that follows the path" in
    /// the module docs).
    fn loss_floor(&self) -> u64 {
        let fixed = self.config.min_budget;
        if !self.config.path_floor || !self.queue_is_ours() || !self.takes_share(CEILING_RATE_SHARE) {
            return fixed;
        }
        // The configured target, not a learnt one: see "A floor that follows the path".
        self.bdp_with(self.config.target_delay)
            .map_or(fixed, |b| (b as u64).clamp(self.lowest_floor(), fixed))
    }

    /// The lowest the floor goes: [`MIN_PATH_FLOOR`] where it follows the path (never over
    /// the configured floor), else the configured floor.
    fn lowest_floor(&self) -> u64 {
        if self.config.path_floor {
            MIN_PATH_FLOOR.min(self.config.min_budget)
        } else {
            self.config.min_budget
        }
    }

    /// The port's rate times its base RTT plus the target delay, bytes: what the receiver
    /// needs outstanding to keep the port busy with a target queue. `None` until measured.
    fn bdp(&self, now: Instant) -> Option<f64> {
        self.bdp_with(self.target(now))
    }

    /// The port's rate times its base RTT plus `queue`, bytes: the round trip with the
    /// servers' hold but without the client's own wait (see *Host time is not the port's
    /// queue* in the module docs). `None` until measured.
    fn bdp_with(&self, queue: Duration) -> Option<f64> {
        let rate = self.link_rate()?;
        let rtt = self.served_base.map(|(d, _)| d).or(self.srtt)?;
        Some(rate * (rtt + queue).as_secs_f64())
    }

    /// The bandwidth-delay product the growth cap is made of, bytes: [`Self::bdp`], whose
    /// round trip is the servers' quickest answer, or, on a port clean of loss
    /// ([`Receiver::is_clean`]), the path's base plus their usual (smoothed) host time
    /// where that is longer (see "The growth cap covers the servers, not the client" in the
    /// module docs). `None` until measured.
    fn cap_bdp(&self, now: Instant) -> Option<f64> {
        let quickest = self.bdp(now)?;
        let clean = self.is_clean(now);
        let usual = match (clean, self.path_base, self.host_srtt, self.link_rate()) {
            (true, Some((path, _)), Some(host), Some(rate)) => rate * (path + host + self.target(now)).as_secs_f64(),
            _ => 0.0,
        };
        Some(quickest.max(usual))
    }

    fn grow(&mut self, now: Instant, delivered: u64) {
        if !self.config.adaptive {
            return;
        }
        // Homa's rule: about one bandwidth-delay product (RTTbytes) plus the target queue is
        // all a receiver needs outstanding; more only queues. Growth stops at OVERCOMMIT times
        // that, at the port's rate, so the budget can still find a faster rate. (The
        // smoothed first-byte time in place of the base RTT let the budget reach 177 KiB at
        // 256 senders on the testbed, with 40% more drops and 5% less goodput, and did not
        // lift 16 concurrent loopback reads, which the delay hold keeps down.)
        if let Some(bdp) = self.cap_bdp(now) {
            let mut cap = OVERCOMMIT * bdp;
            // Competing, a grant's round trip is the smoothed RTT, the other traffic's
            // standing queue included: the budget may hold one such round trip at the
            // port's rate (see "A deep queue of other traffic" in the module docs).
            if let (true, Some(rate), Some(srtt)) = (self.competing, self.link_rate(), self.srtt) {
                cap = cap.max(rate * srtt.as_secs_f64());
            }
            if self.budget as f64 >= cap {
                return;
            }
        }
        let ceiling = self.ceiling(now).unwrap_or(self.config.max_budget);
        if self.budget >= ceiling {
            return;
        }
        let step = if self.slow_start {
            delivered
        } else {
            (u128::from(ADDITIVE_INCREASE) * u128::from(delivered) / u128::from(self.budget.max(1))).max(1) as u64
        };
        self.budget = self.budget.saturating_add(step).min(ceiling);
    }
}

/// `sample` folded into the average `prev` with gain 1/8, as TCP smooths its RTT (RFC 6298);
/// the first sample stands alone.
fn smoothed(prev: Option<Duration>, sample: Duration) -> Duration {
    prev.map_or(sample, |x| x.mul_f64(0.875) + sample.mul_f64(0.125))
}

#[cfg(test)]
mod tests;
