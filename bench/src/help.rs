//! What `watchcache-bench SCENARIO --help` says after the options: each scenario's designs and
//! the columns of the table it prints. Kept next to the code they describe (the scenario's
//! module in the library, its `run_*` function in `main.rs`); `tests/cli.rs` checks that every
//! design a scenario runs is named in its help.

/// Said once, after the list of scenarios.
pub(crate) const RUNNER: &str = "\
Every design of a scenario runs in the same invocation, most in a fresh child process of
their own (timing and memory in separate children), and the runner prints one table with a
row per design and point, then the ratios between designs. A progress bar per child (or per
phase) is drawn on stderr. --json prints one JSON object on stdout instead (the table goes to
stderr); BENCHMARKS.md has the commands and results. `SCENARIO --help` describes a
scenario's designs and columns.";

/// `fanout`.
pub(crate) const FANOUT: &str = "\
One writer thread publishes events of --object-bytes pods; W watchers (tokio tasks on two
workers) each copy every event's frame ({\"type\":\"ADDED\",\"object\":…}\\n) into their own
bounded output buffer, as a socket writer would. Every design's writer builds the same
Arc<ObjectVersion> per event (key, revision, node name around the shared encoded bytes, as a
reflector decodes a watch event); the designs differ in how it reaches the watchers.

Designs:
  ring             ours: one WatchHub; the object is published once into the shared ring and
                   each watcher, a cursor, copies its pre-encoded bytes
  ring_protobuf    the same ring writing Kubernetes protobuf frames; the first watcher to
                   write an event transcodes it once, the others share that encoding
  naive_copy       a bounded channel per watcher; the writer sends each watcher its own deep
                   copy of the decoded object (a serde_json::Value), which it encodes itself
  naive_shared     a bounded channel per watcher carrying the shared object (encode once, a
                   queue per watcher, as kube-apiserver's cacheWatcher)
  tokio_broadcast  tokio::sync::broadcast of the shared object
  copy_only        not a design but the machine's limit: each watcher copies its frames from
                   a shared pool with no writer, queue or wake-up
With --selective each event is for one watcher only (a pod for its node's kubelet): ring
watchers filter on spec.nodeName, the channels are sent to through a node-name index, and
broadcast receivers read every event and skip those not theirs.

Columns:
  design, watchers, events   the run (events published; see --events for the defaults)
  deliveries/s     events received summed over watchers, over the time from the first
                   publish to the last watcher's last receipt
  publish/event    the writer's time per event (for the channel designs this includes
                   waiting on full queues; not the hold-back of ring and broadcast)
  p50, p99, p99.9  publish-to-receipt latency seen by 64 watchers spread evenly (none for
                   copy_only, which publishes nothing)
  peak heap        peak heap above the start, in a separate memory run (every allocation
                   counted) of at most 2 × history events
  peak RSS         the timing child's peak resident set (VmHWM)
  bytes/watcher    (peak heap − every watcher's output buffer) ÷ watchers: what a watcher
                   costs beyond its buffer, including its share of events held in flight
Ratios: deliveries/s of ring against each other design (ring_protobuf against ring), and
bytes/watcher of the channel designs against ring, per point.";

/// `cluster`.
pub(crate) const CLUSTER: &str = "\
For N nodes: a pods watcher per node (spec.nodeName, the kubelet), a Node watcher per node
(metadata.name), 50 watchers of every pod (controllers) and 20 of one namespace each
(operators), under pod churn over 40 namespaces (four events in five) and node-status churn
(one in five). Every design serves the same watchers the same events and copies each frame
into the watcher's own buffer.

Designs:
  ring             ours: two hubs (pods, with spec.nodeName as trigger field, and nodes);
                   every watcher filters, selective ones follow their bucket's chain
  naive_copy       a bounded channel per watcher; the writer routes each event through
                   indexes by node, namespace and name and sends a deep copy
  naive_shared     the same channels and indexes, sending the shared encoded bytes
  tokio_broadcast  one broadcast channel per resource; every receiver reads every event of
                   its resource and skips those not for it
  copy_only        the machine's limit: each watcher copies its events' frames, no writer

Columns:
  design, nodes, watchers, events   the run (watchers = 2 × nodes + 70)
  deliveries/s     events received summed over watchers, per second of the run
  publish/event    the writer's time per event (channel designs: including full queues)
  p50, p99, p99.9  publish-to-receipt latency of sampled watchers; with --rate, at an
                   offered rate rather than flat out
  peak heap        peak heap above the start, in a separate memory run
  bytes/watcher    heap after the watchers were set up ÷ watchers
Ratios: deliveries/s of ring against each baseline, and each baseline's p99 against ring's
(above 1: ring's is lower).";

/// `list`.
pub(crate) const LIST: &str = "\
--concurrent threads each serve one LIST of the whole collection of --items pods of
--item-bytes; a consumer touches each chunk and drops it (nothing is sent), so the figures
are the encoders' own.

Designs:
  streaming           ours: the cache's snapshot of shared encoded objects, written in
                      bounded chunks handed on (and dropped) one at a time
  buffered            the same snapshot, the whole body built, then handed on
  naive_value         a store of serde_json::Values; the response materialised as a Value
                      list (a deep copy of every item), then serialised
  memcpy              the bandwidth reference: the same walk, each item's bytes copied once
                      into a reused 64 KiB buffer
  streaming_protobuf, buffered_protobuf, memcpy_protobuf
                      the same three in Kubernetes protobuf

Columns:
  design, items      the run
  wall               the fastest round (first start to last end of the concurrent LISTs)
                     over --rounds, the fastest of --repeat interleaved timing runs
  MB/s               bytes of all the concurrent LISTs ÷ wall
  peak extra heap    peak heap above the store's, in a separate memory run
  peak RSS           the timing child's peak resident set
  store/object       heap of the store per object (streaming, naive_value, streaming_protobuf)
  encoded/object     encoded bytes per object
  skipped            why a design did not run (naive_value when it would not fit in memory)
Ratios: peak heap of buffered and naive_value against streaming, throughput of streaming
against memcpy, buffered and naive_value (and the same for protobuf), store ÷ encoded.";

/// `watchers`.
pub(crate) const WATCHERS: &str = "\
COUNT idle watchers set up and parked, nothing published.

Designs:
  ring          ours: a Watcher parked on the hub (a cursor, a filter and a wake cell in its
                bucket of the interest registry)
  task_channel  a queue-per-watcher cache's machinery: a bounded channel and a task waiting
                on it (kube-apiserver's cacheWatcher has a channel and a goroutine each)
What serves the connection is the same for both and not counted.

Columns:
  design, count    the run
  heap/watcher     heap above the start ÷ watchers, every allocation counted
  RSS/watcher      resident set growth ÷ watchers
  peak heap        peak heap above the start
  peak RSS         the child's peak resident set
Ratios: task_channel against ring, per watcher, heap and RSS.";

/// `http`.
pub(crate) const HTTP: &str = "\
`watchcache serve` in its own process (built if missing), W streaming watch clients over
loopback in this process, the server's own churn writing pods for --seconds. Latency is from
the write time each churned pod carries to a sampled client's receipt. Each transport of
--transport is a design of the run; --streams-per-connection multiplexes the HTTP/2 ones.

Designs:
  h1       plaintext HTTP/1.1, a connection per watch
  h2       plaintext HTTP/2 (h2c, prior knowledge), watches as streams of shared connections
  h1-tls   HTTP/1.1 over TLS (ALPN), the admin client certificate of the server's --cert-dir
  h2-tls   HTTP/2 over TLS (ALPN h2), watches as streams of shared connections

Columns:
  watchers, conns  watches, and the connections carrying them
  deliveries/s     frames the clients received in the window, per second
  expected/s       churn × watchers: every watcher receives every event
  delivered        delivered ÷ what the sampled clients saw written in the window
  p50, p99, p99.9  write-to-receipt latency of the sampled clients
  RSS/conn         the server's resident set per connection, opened idle before any watch
  RSS/stream       the server's resident set per idle watch, before the churn starts
  handshake CPU    server CPU per connection while they open (the TLS handshake, on TLS)
  server peak RSS  the server's peak resident set (VmHWM)
  server CPU       cores the server used over the window
  CPU/frame        server CPU time per delivered frame
  client CPU       cores the clients (this process) used
  failed           watchers that ended with an error
Ratios: between the transports, and per design delivered ÷ written in the window.";

/// `kubelets`.
pub(crate) const KUBELETS: &str = "\
`watchcache serve --seed-nodes N --node-churn R --churn R --churn-wait` in its own process;
for each node a kubelet: one connection (on HTTP/1.1, one per watch) carrying its pods watch
(fieldSelector spec.nodeName), its Node watch (metadata.name) and watches by name of 4
ConfigMaps and 4 Secrets; plus the controllers, a connection each, watching all pods and all
nodes. Idle memory is read before the churn starts. Every kubelet watch parses what it
receives; 2 controllers parse, the rest count frames.

Designs:
  h1       plaintext HTTP/1.1, a connection per watch
  h2       plaintext HTTP/2 (h2c), a kubelet's watches as streams of its one connection
  h1-tls   HTTP/1.1 over TLS, a connection per watch
  h2-tls   HTTP/2 over TLS, a kubelet's watches as streams of its one connection

Columns:
  conns, streams       connections and watches open
  pods w/s, nodes w/s  pod and node-status writes the server's churn achieved, per second
  delivered            events received ÷ events the watches should have received
  pods p50, pods p99   write-to-receipt latency of the kubelets' pod events
  nodes p50, nodes p99 the same for their Node events
  ctrl p99             the parsing controllers' pod-event latency
  CPU/frame            server CPU time per delivered frame
  server CPU           cores the server used over the window
  RSS/conn, RSS/stream server resident set per idle connection and per idle watch
  handshake CPU        server CPU per connection while they open
  failed               watches that ended with an error";

/// `soak`.
pub(crate) const SOAK: &str = "\
`watchcache serve` for --minutes with churn, watchers that read and reconnect as informers do
(resuming from their last resourceVersion, relisting on a 410), --stalled watchers that never
read, and a lister paging through every pod. A leak shows as growth after warm-up, a stuck
connection as a climbing fd count.

Designs: one, the server as built.

Columns (one row per sample, every --sample-every seconds):
  t (s)            seconds into the run
  server RSS       the server's resident set
  open fds         its open file descriptors
  open watches     its open watches (from /metrics)
Ratios: RSS growth after warm-up and over the second half, fds after warm-up, and the count
of events, clean ends, 410s, relists, stalled reopened, LIST pages and errors.";

/// `etcd`.
pub(crate) const ETCD: &str = "\
On real etcd (one member on loopback; needs etcd installed). The phases (--phases):
  sync      a cache's initial sync of --pods pods, with history fill off (the apiserver's
            start) and on (a list at an older revision, then the replay)
  follow    writers update pods as fast as etcd takes them while a cache follows
  restart   `watchcache serve --etcd` with --clients watch clients, killed and started again
            under writes; each client resumes from its last revision, relists on a 410; with
            history fill on and off

Designs (rows): sync history_fill=false|true, follow, restart history_fill=true|false.

Columns:
  objects          objects synced
  sync             seconds to ready
  peak heap, heap after, peak RSS   the syncing child's
  etcd writes/s    etcd's own write rate (follow; for sync, the populate rate)
  cache events/s   events the reflector applied over the same window
  catch-up         how far behind the cache was when the writers stopped
  relists, 410s    clients that relisted, watch starts refused with 410
  ready, recovery  seconds until the restarted server was ready, and until every client
                   had the write made after the restart
Ratios: follow rate against etcd's, recovery off against on, relists on and off.";

/// `slow-watchers`.
pub(crate) const SLOW_WATCHERS: &str = "\
On real etcd (one member on loopback; needs etcd installed), `watchcache serve --etcd` with
--watchers informer-like watch clients of pods, --slow of them reading a tenth of the write
rate (each sleeps 10/--rate s after a frame), while a writer updates --pods pods at --rate
per second for --seconds. Every client lists once, then watches from the last revision it
saw, and lists afresh on an in-stream 410. The history window is --history events, so the
slow clients are lapped.

A 410 reaches a slow client only after what the kernel buffered before it (about 4 MiB on
loopback, ten minutes at a slow client's pace). So the run ends with a read-on: the writer
stopped, the slow clients read at full speed until each has the last write (at most 180 s).

The server compacts etcd every --compaction-interval s (300 by default, the apiserver's; 0:
never in the run). A slow client falls further behind all run long; once its place is below
a compaction it gets 410 in either design, so the default shows what catch-up cannot save,
and 0 what it does while etcd still holds the history.

Designs (rows):
  catch_up   --watch-catch-up-reads at its default: a lapped watcher reads etcd's history
  relist     --watch-catch-up-reads 0: a lapped watcher gets 410 and relists (the apiserver)

Columns:
  410s             in-stream 410s the clients received; 410s sent: those the server sent
  relists          LISTs after each client's first; listed: their bytes
  catch-ups        watches that read etcd's history (and the events they served); refused:
                   those that waited in line too long and got 410 (never: the server does
                   not bound the wait; the places go round instead)
  etcd ranges, etcd watches   Range calls and Watch streams etcd served over the run
  RSS start, RSS end, peak RSS  the server's resident memory (every 10 s in the JSON)
  p50, p99, p99.9  delivery latency of the healthy clients, write to frame
  healthy events, slow events   events the healthy and the slow clients received
  read-on ...      the read-on: its seconds, the slow clients that reached the last write,
                   their 410s, relists, listed bytes and events, the events catch-ups
                   served, etcd's Range calls and Watch streams, and the server's peak RSS
                   over run and read-on
Ratios: relists, listed bytes, 410s sent, p99, peak RSS, read-on listed bytes and read-on
seconds of relist against catch_up.";

/// `patch`.
pub(crate) const OPERATOR: &str = "\
N custom resources of about --cr-bytes (one per tenant), each reconciled by an operator into
a StatefulSet, a headless Service and a ConfigMap it owns, through `watchcache serve` in this
process over loopback. The operator has informers (LIST, then WATCH) on the custom resources
and, by label, on each kind of child; a work queue; --concurrency workers that server-side
apply the children and write the resource's status. A changer patches one resource's spec at
--change-rate per second for --seconds, each change a new version the operator copies into
its StatefulSet.

Designs: one, the server as built; a row per N, on a fresh server each.

Columns:
  CR JSON          a custom resource's JSON, as a LIST serves it
  heap/CR          the process's heap after creating the resources, less before, per
                   resource: the store, the cache and the watch history together
  heap/JSON        the two against each other
  creates/s        custom resources created per second, 32 at a time
  reconcile all    the operator's start to every resource reconciled once
  changes, seen    spec changes sent; StatefulSet updates of them the operator saw
  watch p50, p99   a change sent to the operator's informer seeing it
  to child         a change sent to the operator's StatefulSet informer seeing its update
  LIST             a full LIST of the custom resources (median of three)
  errors           failed writes (none expected)";

pub(crate) const PATCH: &str = "\
A label PATCH (kubectl label: a merge patch of metadata.labels) of a ConfigMap whose
metadata.finalizers holds N entries, N doubling up to near the object size limit, through
`watchcache serve` in this process over loopback: work that should grow with N, not N².

Designs: one, the server as built; a row per N.

Columns:
  finalizers       N
  object           the object's encoded size
  median, min      time per PATCH over --patches
  µs per 1000      median per 1,000 finalizers
  per doubling     median against the row before: about 2 is linear, about 4 quadratic";

/// `snapshots`.
pub(crate) const SNAPSHOTS: &str = "\
`watchcache serve --seed-pods N --churn RATE --history H` in its own process, its resident set
sampled every second, while one client pages through every pod with limit and continue, its
pages spread over --list-seconds. A cache keeps one current snapshot; a paginated LIST pins
the one it reads; so RSS should grow by the pinned snapshot and the history, and every page
should carry one resourceVersion.

Designs (a server process each):
  pinned        the default snapshot retention (75 s after a LIST's last page)
  retention_0   --snapshot-retention 0: the pin goes at the reflector's next retention tick
  no_list       the default, with no LIST at all (what the churn alone costs)
and a row `heap (in-process)`: the same store and cache in a child, every allocation
counted: the store's log, the cache's growth and the pinned snapshot.

Columns:
  writes/s         writes per second after the first 10 s (the cache's revisions)
  RSS ready, RSS start, RSS peak, RSS end   at /readyz, the lowest in the first 10 s, the
                   peak after the start, at the end
  growth           RSS peak − RSS start
  after 10 s       the peak after 10 s − RSS 10 s in
  data, history    the seeded pods' JSON bytes, the ring's history bytes
  growth ÷ (data + history)   the issue's target is at most 2
  pages, completed, one RV, 410s   the LIST's pages, whether it completed, whether every
                   page had one resourceVersion, continues refused with 410
  pinned max       most snapshots pinned at once (from /metrics)
  store log, cache growth, pinned snapshot   heap figures of the in-process row
  undone reads, store reads   LISTs served by undoing events, reads the store answered
Ratios: RSS growth of the designs against each other, and per design growth ÷ (data +
history).";

/// `proof`.
pub(crate) const PROOF: &str = "\
On real etcd 3.4.23 (needs it installed): what it costs etcd to let a cache behind etcd's
revision serve a consistent read. A prefix of --keys pods of 4 KB, then a busy other prefix
written on at --busy-rate throughout, so the store's revision is ahead of the pods'.

Designs:
  old_proof   the two reads the old proof made: a count-only range of the prefix, then a
              keys-only range since the cache's revision with limit 1
  fence       a put at /registry/pods, timed until the cache's watch of the prefix yields the
              progress notification

Columns:
  design, keys     the run (--reps timed repetitions each, after a few untimed)
  p50, p99, max    time per proof
  count p50, keys-only p50   the old proof's two reads apart
  put p50          the fence's put alone
  etcd CPU/op      etcd's threads' CPU time per proof, less the busy writer's
  busy writes/s    the busy prefix's write rate achieved
Ratios: old_proof against fence: p50, p99, etcd CPU.";

/// `authz`.
pub(crate) const AUTHZ: &str = "\
The same GET of one ConfigMap and LIST of a small namespace, sequential on one keep-alive
HTTP/1.1 connection, against three servers in this process on loopback. Rounds alternate
the designs (A B C C B A …) so drift falls evenly.

Designs:
  anonymous      AlwaysAllow, no credentials
  rbac-cached    RBAC, a bearer-token user allowed by a RoleBinding among --filler others;
                 the decision cache warm
  rbac-uncached  the same, the policy replaced by an identical one before every request, so
                 each pays what the first request after an RBAC change pays

Columns:
  design, op       the run (get or list)
  requests, failed requests made, requests that did not succeed
  p50, p99         latency over every request of the design and operation
  CPU/request      this process's CPU (client and server) per request
  requests/s       requests ÷ the time the design and operation took
Ratios: each design against anonymous, p50 and CPU, per operation.";

/// `transport-memory`.
pub(crate) const TRANSPORT_MEMORY: &str = "\
What idle connections and streams cost `watchcache serve` (built if missing), in a process of
its own (its RSS, from /proc), each figure on a fresh server after one was opened, so that what
the first sets up is not counted; and how many socket writes one event fanned out to the
streams of one HTTP/2 connection takes (strace; needs strace installed).

Designs (rows):
  tls_h1_idle_connection   an idle TLS connection, HTTP/1.1, handshake done
  tls_h2_idle_connection   an idle TLS connection, HTTP/2, settings exchanged, no stream
  h2_idle_watch_stream     an idle watch on a stream of one HTTP/2 connection over TLS
  h2_event_writes          one event of about 2.3 KiB to --streams watches of one plaintext
                           HTTP/2 connection

Columns:
  design           the row
  count            connections or streams opened (the event's streams for h2_event_writes)
  RSS each         server RSS growth ÷ count
  writes           socket writes of more than 8 bytes after the event (with the POST's
                   answer); each write is printed on stderr";

/// `vs-etcd`.
pub(crate) const VS_ETCD: &str = "\
Against the peer a user could pick instead: watching etcd directly. One etcd member on
loopback (needs etcd installed; data on /dev/shm when it has room), one writer straight to it
for every design: --keys ConfigMaps of --value-bytes updated round robin at --rate a second,
each stamped with its write time. Every watch covers the same prefix, from the revision then.
Each point runs --reps times, the designs' order reversed every other time (A B B A), each
run on a fresh etcd. The clients are cheap: etcd's skim each response in place (events
counted, values read only on a sampled watch), watchcache's count newlines.

Designs:
  writes-only    no watcher: what the writes alone cost etcd (at the first --watchers only)
  etcd           etcd's gRPC watch, --watches-per-connection watches multiplexed on each
                 connection's watch stream (as Go's clientv3), without prev_kv
  etcd-prev-kv   the same with prev_kv, as the apiserver's storage layer asks
  h1, h2, h1-tls, h2-tls   `watchcache serve --etcd` (built with etcd if missing) in front of
                 the same etcd: HTTP/1.1 a connection per watch, HTTP/2
                 --watches-per-connection streams a connection; plaintext or TLS

Columns:
  design, watchers, rate, rep   the run
  writes/s         the writer's achieved rate in the window (a saturated etcd slows it)
  delivered        events received in the window ÷ (writes in the window × watchers); the
                   edges of the window differ by what is in flight
  sampled min      the fewest of the window's writes one parsing watch received (read on 2 s
                   past the window), ÷ writes; lost: what the parsing watches missed in all
  server CPU       etcd's for etcd designs; watchcache's plus etcd's for the others, in cores
  etcd CPU         etcd's alone
  CPU/event        server CPU ÷ events delivered
  p50, p99         write to receipt, from the sampled watches (one in watchers / 64)
  RSS/watcher      server RSS growth from before the connections to the window's end (etcd's
                   for etcd designs, watchcache's for the others)
  client CPU       this process's watch clients (the writer's thread left out)
Ratios: at each point, each watchcache design against each etcd design: how many times
cheaper per delivered event (etcd's CPU/event ÷ its own), and its p99 ÷ etcd's.";
