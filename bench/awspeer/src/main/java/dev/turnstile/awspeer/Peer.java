package dev.turnstile.awspeer;

import java.io.InputStream;
import java.net.URI;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

import com.amazonaws.services.dynamodbv2.AcquireLockOptions;
import com.amazonaws.services.dynamodbv2.AmazonDynamoDBLockClient;
import com.amazonaws.services.dynamodbv2.AmazonDynamoDBLockClientOptions;
import com.amazonaws.services.dynamodbv2.LockItem;

import software.amazon.awssdk.auth.credentials.AwsBasicCredentials;
import software.amazon.awssdk.auth.credentials.StaticCredentialsProvider;
import software.amazon.awssdk.awscore.retry.AwsRetryStrategy;
import software.amazon.awssdk.core.client.config.ClientOverrideConfiguration;
import software.amazon.awssdk.core.util.VersionInfo;
import software.amazon.awssdk.http.apache5.Apache5HttpClient;
import software.amazon.awssdk.regions.Region;
import software.amazon.awssdk.services.dynamodb.DynamoDbClient;
import software.amazon.awssdk.services.dynamodb.model.AttributeValue;
import software.amazon.awssdk.services.dynamodb.model.GetItemRequest;
import software.amazon.awssdk.services.dynamodb.model.PutItemRequest;

/**
 * The AWS lock client peer of turnstile's benchmark: N workers, each with an
 * AmazonDynamoDBLockClient of its own (its own owner name and heartbeat thread, one shared
 * DynamoDbClient), run the bench's hot-key loop in a closed loop for a warm-up and a
 * measured window:
 *
 * <pre>
 *   acquireLock (blocking) → strongly consistent GetItem + PutItem of the counter → releaseLock
 * </pre>
 *
 * exactly as internal/bench/scenarios.go's closedLoop does for lockcore's strategies. The
 * lock client's calls and the critical section's go through two DynamoDbClients, each with
 * a {@link Counting} interceptor, so the bench can report the lock's own calls per critical
 * section. The peer prints one JSON line on stdout with the raw figures (per-worker counts,
 * critical-section intervals, counter snapshots at the window's edges); cmd/bench turns it
 * into the same record as its own strategies and checks the counter for lost updates.
 *
 * <p>With {@code --mode=burst} it runs the bench's burst scenario instead (as
 * scenarios.go's Burst): for each of {@code rounds} fresh keys ({@code <key>-<round>}) the
 * N workers are released at once and each does one critical section; it reports each
 * round's time (release of the workers to the last release of the lock), each worker's
 * wait and the lock's calls over all rounds.
 *
 * <p>Arguments, all {@code --name=value}: endpoint, lock-table, data-table, key, workers,
 * duration-ms, warmup-ms, lease-ms, heartbeat-ms, refresh-ms (0: the library's default,
 * 1 s), warmup-cycles, owner, mode (hotkey, the default, or burst), rounds (burst; default
 * 3).
 */
public final class Peer {
    /** Sort key of the lock rows (the lock table has pk and sk strings). */
    static final String LOCK_SORT_KEY = "awslockclient";

    /** How long a blocking acquireLock may wait: the whole run, and much more. */
    static final long BLOCKING_WAIT_MS = TimeUnit.HOURS.toMillis(24);

    private Peer() {
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = parse(argv);
        Settings s = new Settings(a);
        String json = s.burst ? new Run(s).runBurst() : new Run(s).run();
        System.out.println(json);
        System.out.flush();
        // The lock clients' heartbeat threads are daemons; exit without releasing anything
        // that may still be half-acquired after the interrupts of the stop.
        System.exit(0);
    }

    static Map<String, String> parse(String[] argv) {
        Map<String, String> m = new HashMap<>();
        for (String arg : argv) {
            if (!arg.startsWith("--") || !arg.contains("=")) {
                throw new IllegalArgumentException("argument " + arg + ": want --name=value");
            }
            int i = arg.indexOf('=');
            m.put(arg.substring(2, i), arg.substring(i + 1));
        }
        return m;
    }

    /** The run's settings. */
    static final class Settings {
        final URI endpoint;
        final String lockTable;
        final String dataTable;
        final String key;
        final int workers;
        final long durationNanos;
        final long warmupNanos;
        final long leaseMs;
        final long heartbeatMs;
        final long refreshMs; // 0: the library's default
        final int warmupCycles;
        final String owner;
        final boolean burst;
        final int rounds;

        Settings(Map<String, String> a) {
            endpoint = URI.create(need(a, "endpoint"));
            lockTable = need(a, "lock-table");
            dataTable = need(a, "data-table");
            key = need(a, "key");
            workers = Integer.parseInt(need(a, "workers"));
            durationNanos = TimeUnit.MILLISECONDS.toNanos(Long.parseLong(need(a, "duration-ms")));
            warmupNanos = TimeUnit.MILLISECONDS.toNanos(Long.parseLong(a.getOrDefault("warmup-ms", "0")));
            leaseMs = Long.parseLong(a.getOrDefault("lease-ms", "3000"));
            heartbeatMs = Long.parseLong(a.getOrDefault("heartbeat-ms", "1000"));
            refreshMs = Long.parseLong(a.getOrDefault("refresh-ms", "0"));
            warmupCycles = Integer.parseInt(a.getOrDefault("warmup-cycles", "10"));
            owner = a.getOrDefault("owner", "awspeer");
            String mode = a.getOrDefault("mode", "hotkey");
            if (!mode.equals("hotkey") && !mode.equals("burst")) {
                throw new IllegalArgumentException("--mode=" + mode + ": want hotkey or burst");
            }
            burst = mode.equals("burst");
            rounds = Integer.parseInt(a.getOrDefault("rounds", "3"));
            if (workers < 1 || durationNanos <= 0 || rounds < 1) {
                throw new IllegalArgumentException("workers ≥ 1, duration-ms > 0 and rounds ≥ 1 please");
            }
        }

        private static String need(Map<String, String> a, String k) {
            String v = a.get(k);
            if (v == null || v.isEmpty()) {
                throw new IllegalArgumentException("missing --" + k + "=...");
            }
            return v;
        }
    }

    /** What a worker collects (as workerStats in scenarios.go). */
    static final class WorkerStats {
        int inWindow;
        int total;
        int errors;
        long maxWaitNanos;
        final List<Long> csNanos = new ArrayList<>();
        final List<Long> readNanos = new ArrayList<>();
        final List<long[]> intervals = new ArrayList<>();
        String errorSample;
    }

    /** Detects two holders inside a critical section at once (as Overlap in stats.go). */
    static final class Overlap {
        private final AtomicInteger cur = new AtomicInteger();
        private final AtomicLong events = new AtomicLong();

        void enter() {
            if (cur.incrementAndGet() > 1) {
                events.incrementAndGet();
            }
        }

        void exit() {
            cur.decrementAndGet();
        }

        long events() {
            return events.get();
        }
    }

    /** A worker's state, guarded by the worker's monitor: the stop interrupts only waiters. */
    enum State { IDLE, ACQUIRING, HOLDING, DONE }

    static final class Run {
        final Settings s;
        final Counting lockCount = new Counting();
        final Counting dataCount = new Counting();
        final DynamoDbClient lockDb;
        final DynamoDbClient dataDb;
        final Overlap overlap = new Overlap();
        volatile boolean stop;
        long start; // System.nanoTime() at the start of the run

        Run(Settings s) {
            this.s = s;
            // The lock client's calls: one per waiter and one heartbeat per holder at most.
            lockDb = client(s, lockCount, 2 * s.workers + 8);
            dataDb = client(s, dataCount, s.workers + 8);
        }

        /**
         * A client configured like internal/ddblocal's Go clients: static credentials, region
         * us-east-1, connect timeout 2 s, read timeout 5 s, 3 attempts without a retry quota.
         */
        static DynamoDbClient client(Settings s, Counting counting, int maxConnections) {
            return DynamoDbClient.builder()
                .endpointOverride(s.endpoint)
                .region(Region.US_EAST_1)
                .credentialsProvider(StaticCredentialsProvider.create(AwsBasicCredentials.create("local", "local")))
                .httpClientBuilder(Apache5HttpClient.builder()
                    .maxConnections(maxConnections)
                    .connectionTimeout(Duration.ofSeconds(2))
                    .socketTimeout(Duration.ofSeconds(5)))
                .overrideConfiguration(ClientOverrideConfiguration.builder()
                    .retryStrategy(AwsRetryStrategy.standardRetryStrategy().toBuilder()
                        .maxAttempts(3)
                        .circuitBreakerEnabled(false)
                        .build())
                    .addExecutionInterceptor(counting)
                    .build())
                .build();
        }

        AmazonDynamoDBLockClient lockClient(int i) {
            return new AmazonDynamoDBLockClient(AmazonDynamoDBLockClientOptions.builder(lockDb, s.lockTable)
                .withPartitionKeyName("pk")
                .withSortKeyName("sk")
                .withOwnerName(String.format("%s-w-%02d", s.owner, i))
                .withTimeUnit(TimeUnit.MILLISECONDS)
                .withLeaseDuration(s.leaseMs)
                .withHeartbeatPeriod(s.heartbeatMs)
                .withCreateHeartbeatBackgroundThread(true)
                .build());
        }

        AcquireLockOptions acquireOptions() {
            return acquireOptions(s.key);
        }

        AcquireLockOptions acquireOptions(String key) {
            AcquireLockOptions.AcquireLockOptionsBuilder b = AcquireLockOptions.builder(key)
                .withSortKey(LOCK_SORT_KEY)
                .withAdditionalTimeToWaitForLock(BLOCKING_WAIT_MS)
                .withTimeUnit(TimeUnit.MILLISECONDS);
            if (s.refreshMs > 0) {
                b.withRefreshPeriod(s.refreshMs);
            }
            return b.build();
        }

        Map<String, AttributeValue> counterKey(String key) {
            Map<String, AttributeValue> k = new HashMap<>();
            k.put("pk", AttributeValue.builder().s("CTR#" + key).build());
            k.put("sk", AttributeValue.builder().s("STOCK").build());
            return k;
        }

        long readCounter() {
            return readCounter(s.key);
        }

        long readCounter(String key) {
            Map<String, AttributeValue> it = dataDb.getItem(GetItemRequest.builder()
                .tableName(s.dataTable).key(counterKey(key)).consistentRead(true).build()).item();
            AttributeValue n = it == null ? null : it.get("n");
            return n == null || n.n() == null ? 0 : Long.parseLong(n.n());
        }

        void writeCounter(long v) {
            writeCounter(s.key, v);
        }

        void writeCounter(String key, long v) {
            Map<String, AttributeValue> it = counterKey(key);
            it.put("n", AttributeValue.builder().n(Long.toString(v)).build());
            dataDb.putItem(PutItemRequest.builder().tableName(s.dataTable).item(it).build());
        }

        boolean within(long t) {
            long rel = t - start;
            return rel > s.warmupNanos && rel <= s.warmupNanos + s.durationNanos;
        }

        String run() throws Exception {
            List<AmazonDynamoDBLockClient> clients = new ArrayList<>();
            for (int i = 0; i < s.workers; i++) {
                clients.add(lockClient(i));
            }
            AcquireLockOptions opts = acquireOptions();
            // Warm the JVM up (class loading, JIT) with uncontended cycles on the hot key,
            // as the Go strategies' closed loop does one cycle to create the lock rows.
            for (int i = 0; i < s.warmupCycles; i++) {
                LockItem l = clients.get(0).acquireLock(opts);
                clients.get(0).releaseLock(l);
            }
            readCounter();

            WorkerStats[] stats = new WorkerStats[s.workers];
            State[] states = new State[s.workers];
            Object[] monitors = new Object[s.workers];
            Thread[] threads = new Thread[s.workers];
            for (int i = 0; i < s.workers; i++) {
                stats[i] = new WorkerStats();
                states[i] = State.IDLE;
                monitors[i] = new Object();
            }
            start = System.nanoTime();
            for (int i = 0; i < s.workers; i++) {
                final int w = i;
                threads[i] = new Thread(() -> work(w, clients.get(w), opts, stats[w], states, monitors[w]), "worker-" + i);
                threads[i].start();
            }
            sleepUntil(start + s.warmupNanos);
            Counting.Usage lock0 = lockCount.snapshot();
            Counting.Usage data0 = dataCount.snapshot();
            sleepUntil(start + s.warmupNanos + s.durationNanos);
            Counting.Usage lock1 = lockCount.snapshot();
            Counting.Usage data1 = dataCount.snapshot();
            stop = true;
            // Waiters are interrupted (a blocking acquireLock sleeps between polls); holders
            // finish their critical section and release. The SDK swallows an interrupt that
            // lands inside a call, so keep interrupting until every worker is done.
            long giveUp = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            for (int i = 0; i < s.workers; i++) {
                while (threads[i].isAlive()) {
                    for (int j = i; j < s.workers; j++) {
                        synchronized (monitors[j]) {
                            if (states[j] == State.ACQUIRING) {
                                threads[j].interrupt();
                            }
                        }
                    }
                    threads[i].join(20);
                    if (System.nanoTime() > giveUp) {
                        throw new IllegalStateException("worker " + i + " did not stop within 60 s of the end of the run");
                    }
                }
            }
            return json(stats, lock0, lock1, data0, data1);
        }

        /** A burst round's figures. */
        static final class Round {
            long nanos;       // release of the workers to the last worker done
            int done;         // critical sections completed
            int errors;
            long[] waitNanos; // each worker's acquireLock (0: it failed)
        }

        /** Per-round deadline: the AWS client's rounds take seconds; this is a hang. */
        static final long ROUND_DEADLINE_NANOS = TimeUnit.MINUTES.toNanos(5);

        String runBurst() throws Exception {
            List<AmazonDynamoDBLockClient> clients = new ArrayList<>();
            for (int i = 0; i < s.workers; i++) {
                clients.add(lockClient(i));
            }
            // Warm the JVM up on a key of its own, as in run().
            AcquireLockOptions warm = acquireOptions(s.key + "-warm");
            for (int i = 0; i < s.warmupCycles; i++) {
                LockItem l = clients.get(0).acquireLock(warm);
                clients.get(0).releaseLock(l);
            }
            readCounter(s.key + "-warm");
            Counting.Usage lock0 = lockCount.snapshot();
            Counting.Usage data0 = dataCount.snapshot();
            Round[] rounds = new Round[s.rounds];
            String sample = null;
            for (int r = 0; r < s.rounds; r++) {
                Round rd = new Round();
                rd.waitNanos = new long[s.workers];
                rounds[r] = rd;
                String key = s.key + "-" + r;
                AcquireLockOptions opts = acquireOptions(key);
                CountDownLatch gate = new CountDownLatch(1);
                AtomicInteger done = new AtomicInteger();
                AtomicInteger errors = new AtomicInteger();
                String[] errorSample = new String[1];
                Thread[] threads = new Thread[s.workers];
                for (int i = 0; i < s.workers; i++) {
                    final int w = i;
                    final AmazonDynamoDBLockClient c = clients.get(i);
                    threads[i] = new Thread(() -> {
                        try {
                            gate.await();
                            long a0 = System.nanoTime();
                            LockItem lock = c.acquireLock(opts);
                            rd.waitNanos[w] = System.nanoTime() - a0;
                            overlap.enter();
                            try {
                                writeCounter(key, readCounter(key) + 1);
                                done.incrementAndGet();
                            } finally {
                                overlap.exit();
                                if (!c.releaseLock(lock)) {
                                    errors.incrementAndGet();
                                    errorSample[0] = "releaseLock: the lock was no longer ours";
                                }
                            }
                        } catch (InterruptedException | RuntimeException e) {
                            errors.incrementAndGet();
                            errorSample[0] = "burst: " + e;
                        }
                    }, "burst-" + r + "-" + i);
                    threads[i].start();
                }
                long t0 = System.nanoTime();
                gate.countDown();
                for (Thread t : threads) {
                    long left = t0 + ROUND_DEADLINE_NANOS - System.nanoTime();
                    t.join(Math.max(1, TimeUnit.NANOSECONDS.toMillis(left)));
                    if (t.isAlive()) {
                        throw new IllegalStateException("burst round " + r + ": a worker did not finish within 5 minutes");
                    }
                }
                rd.nanos = System.nanoTime() - t0;
                rd.done = done.get();
                rd.errors = errors.get();
                if (errorSample[0] != null) {
                    sample = errorSample[0];
                }
            }
            Counting.Usage lock1 = lockCount.snapshot();
            Counting.Usage data1 = dataCount.snapshot();
            StringBuilder b = new StringBuilder(1 << 12);
            header(b, lock0, lock1, data0, data1);
            b.append(",\"rounds\":[");
            for (int r = 0; r < rounds.length; r++) {
                Round rd = rounds[r];
                b.append(r > 0 ? "," : "").append("{\"ns\":").append(rd.nanos)
                    .append(",\"done\":").append(rd.done)
                    .append(",\"errors\":").append(rd.errors)
                    .append(",\"wait_ns\":[");
                for (int i = 0; i < rd.waitNanos.length; i++) {
                    b.append(i > 0 ? "," : "").append(rd.waitNanos[i]);
                }
                b.append("]}");
            }
            b.append(']');
            if (sample != null) {
                b.append(",\"error_sample\":").append(quote(sample));
            }
            return b.append('}').toString();
        }

        void work(int w, AmazonDynamoDBLockClient client, AcquireLockOptions opts, WorkerStats st, State[] states, Object monitor) {
            while (true) {
                synchronized (monitor) {
                    if (stop) {
                        states[w] = State.DONE;
                        return;
                    }
                    states[w] = State.ACQUIRING;
                }
                long t0 = System.nanoTime();
                LockItem lock = null;
                Exception failure = null;
                try {
                    lock = client.acquireLock(opts);
                } catch (InterruptedException e) {
                    failure = e;
                } catch (RuntimeException e) {
                    failure = e;
                }
                synchronized (monitor) {
                    states[w] = State.HOLDING;
                    Thread.interrupted(); // an interrupt meant for the wait is spent
                }
                long t1 = System.nanoTime();
                if (t1 - start > s.warmupNanos) {
                    st.maxWaitNanos = Math.max(st.maxWaitNanos, t1 - t0);
                }
                if (lock == null) {
                    if (stop) {
                        continue; // cut off by the end of the run
                    }
                    st.errors++;
                    st.errorSample = "acquireLock: " + failure;
                    sleepQuietly(10);
                    continue;
                }
                if (stop) {
                    release(client, lock, st); // acquired as the run ended: no critical section
                    continue;
                }
                long cs0 = System.nanoTime();
                overlap.enter();
                boolean ok = false;
                long read = 0;
                try {
                    long r0 = System.nanoTime();
                    long v = readCounter();
                    read = System.nanoTime() - r0;
                    writeCounter(v + 1);
                    ok = true;
                } catch (RuntimeException e) {
                    st.errorSample = "critical section: " + e;
                }
                long cs1 = System.nanoTime();
                overlap.exit();
                if (ok) {
                    st.total++;
                    if (within(cs1)) {
                        st.inWindow++;
                        st.csNanos.add(cs1 - cs0);
                        st.readNanos.add(read);
                        st.intervals.add(new long[] {w, cs0 - start, cs1 - start});
                    }
                } else {
                    st.errors++;
                }
                release(client, lock, st);
            }
        }

        static void release(AmazonDynamoDBLockClient client, LockItem lock, WorkerStats st) {
            try {
                if (!client.releaseLock(lock)) {
                    st.errors++;
                    st.errorSample = "releaseLock: the lock was no longer ours";
                }
            } catch (RuntimeException e) {
                st.errors++;
                st.errorSample = "releaseLock: " + e;
            }
        }

        /** The fields both modes print first: what ran, the safety count, the usage. */
        void header(StringBuilder b, Counting.Usage lock0, Counting.Usage lock1, Counting.Usage data0, Counting.Usage data1) {
            b.append("{\"lock_client_version\":").append(quote(lockClientVersion()))
                .append(",\"sdk_version\":").append(quote(VersionInfo.SDK_VERSION))
                .append(",\"java_version\":").append(quote(System.getProperty("java.version")))
                .append(",\"lease_ms\":").append(s.leaseMs)
                .append(",\"heartbeat_ms\":").append(s.heartbeatMs)
                .append(",\"refresh_ms\":").append(s.refreshMs > 0 ? s.refreshMs : 1000)
                .append(",\"warmup_ns\":").append(s.warmupNanos)
                .append(",\"duration_ns\":").append(s.durationNanos)
                .append(",\"double_holders\":").append(overlap.events())
                .append(",\"lock_start\":").append(lock0.json())
                .append(",\"lock_end\":").append(lock1.json())
                .append(",\"data_start\":").append(data0.json())
                .append(",\"data_end\":").append(data1.json())
                .append(",\"slowest_call_ns\":").append(Math.max(lockCount.slowestNanos(), dataCount.slowestNanos()))
                .append(",\"slow_calls\":").append(lockCount.slowCalls() + dataCount.slowCalls());
        }

        String json(WorkerStats[] stats, Counting.Usage lock0, Counting.Usage lock1, Counting.Usage data0, Counting.Usage data1) {
            StringBuilder b = new StringBuilder(1 << 16);
            header(b, lock0, lock1, data0, data1);
            String sample = null;
            b.append(",\"workers\":[");
            for (int i = 0; i < stats.length; i++) {
                WorkerStats st = stats[i];
                if (i > 0) {
                    b.append(',');
                }
                b.append("{\"in_window\":").append(st.inWindow)
                    .append(",\"total\":").append(st.total)
                    .append(",\"errors\":").append(st.errors)
                    .append(",\"max_wait_ns\":").append(st.maxWaitNanos)
                    .append(",\"cs_ns\":").append(st.csNanos)
                    .append(",\"read_ns\":").append(st.readNanos)
                    .append(",\"intervals\":[");
                for (int j = 0; j < st.intervals.size(); j++) {
                    long[] iv = st.intervals.get(j);
                    b.append(j > 0 ? "," : "").append('[').append(iv[1]).append(',').append(iv[2]).append(']');
                }
                b.append("]}");
                if (st.errorSample != null) {
                    sample = st.errorSample;
                }
            }
            b.append(']');
            if (sample != null) {
                b.append(",\"error_sample\":").append(quote(sample));
            }
            return b.append('}').toString();
        }
    }

    /** The lock client's version, from the Maven metadata in its jar. */
    static String lockClientVersion() {
        try (InputStream in = AmazonDynamoDBLockClient.class.getResourceAsStream(
            "/META-INF/maven/com.amazonaws/dynamodb-lock-client/pom.properties")) {
            if (in == null) {
                return "unknown";
            }
            Properties p = new Properties();
            p.load(in);
            return p.getProperty("version", "unknown");
        } catch (Exception e) {
            return "unknown";
        }
    }

    static void sleepUntil(long deadline) throws InterruptedException {
        long d;
        while ((d = deadline - System.nanoTime()) > 0) {
            TimeUnit.NANOSECONDS.sleep(d);
        }
    }

    static void sleepQuietly(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    static String quote(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"' -> b.append("\\\"");
                case '\\' -> b.append("\\\\");
                case '\n' -> b.append("\\n");
                case '\r' -> b.append("\\r");
                case '\t' -> b.append("\\t");
                default -> {
                    if (c < 0x20) {
                        b.append(String.format("\\u%04x", (int) c));
                    } else {
                        b.append(c);
                    }
                }
            }
        }
        return b.append('"').toString();
    }
}
