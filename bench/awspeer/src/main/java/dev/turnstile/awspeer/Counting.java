package dev.turnstile.awspeer;

import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.LongAdder;

import software.amazon.awssdk.core.SdkRequest;
import software.amazon.awssdk.core.SdkResponse;
import software.amazon.awssdk.core.interceptor.Context;
import software.amazon.awssdk.core.interceptor.ExecutionAttribute;
import software.amazon.awssdk.core.interceptor.ExecutionAttributes;
import software.amazon.awssdk.core.interceptor.ExecutionInterceptor;
import software.amazon.awssdk.core.interceptor.SdkExecutionAttribute;
import software.amazon.awssdk.services.dynamodb.model.CancellationReason;
import software.amazon.awssdk.services.dynamodb.model.ConditionalCheckFailedException;
import software.amazon.awssdk.services.dynamodb.model.ConsumedCapacity;
import software.amazon.awssdk.services.dynamodb.model.DeleteItemRequest;
import software.amazon.awssdk.services.dynamodb.model.DeleteItemResponse;
import software.amazon.awssdk.services.dynamodb.model.GetItemRequest;
import software.amazon.awssdk.services.dynamodb.model.GetItemResponse;
import software.amazon.awssdk.services.dynamodb.model.PutItemRequest;
import software.amazon.awssdk.services.dynamodb.model.PutItemResponse;
import software.amazon.awssdk.services.dynamodb.model.QueryRequest;
import software.amazon.awssdk.services.dynamodb.model.QueryResponse;
import software.amazon.awssdk.services.dynamodb.model.ReturnConsumedCapacity;
import software.amazon.awssdk.services.dynamodb.model.TransactWriteItemsRequest;
import software.amazon.awssdk.services.dynamodb.model.TransactionCanceledException;
import software.amazon.awssdk.services.dynamodb.model.UpdateItemRequest;
import software.amazon.awssdk.services.dynamodb.model.UpdateItemResponse;

/**
 * Counts DynamoDB calls and capacity units the way the Go bench's CountingDB does
 * (internal/bench/counting.go), as an SDK execution interceptor: every request asks for
 * ReturnConsumedCapacity TOTAL; a successful write counts the engine's figure (at least 1
 * WCU), a write refused by its condition 1 WCU, a successful read the engine's figure, a
 * call that failed before a decision nothing. SDK-level retries count once (an execution
 * is one call), and operations carry the same names ("UpdateItem", "UpdateItem failed").
 */
final class Counting implements ExecutionInterceptor {
    /** Calls slower than this are stalls (as SlowCall in counting.go). */
    static final long SLOW_CALL_NANOS = 500_000_000L;

    private static final ExecutionAttribute<Long> START = new ExecutionAttribute<>("awspeer.start");

    private final AtomicLong calls = new AtomicLong();
    private final AtomicLong condFails = new AtomicLong();
    private final AtomicLong wcuMilli = new AtomicLong();
    private final AtomicLong rcuMilli = new AtomicLong();
    private final AtomicLong slowestNanos = new AtomicLong();
    private final AtomicLong slow = new AtomicLong();
    private final Map<String, LongAdder> ops = new ConcurrentHashMap<>();

    /** A copy of the counters at one moment. */
    record Usage(long calls, long condFails, double wcu, double rcu, Map<String, Long> ops) {
        String json() {
            StringBuilder b = new StringBuilder();
            b.append("{\"calls\":").append(calls).append(",\"cond_fails\":").append(condFails)
                .append(",\"wcu\":").append(wcu).append(",\"rcu\":").append(rcu).append(",\"ops\":{");
            boolean first = true;
            for (Map.Entry<String, Long> e : ops.entrySet()) {
                if (!first) {
                    b.append(',');
                }
                first = false;
                b.append(Peer.quote(e.getKey())).append(':').append(e.getValue());
            }
            return b.append("}}").toString();
        }
    }

    Usage snapshot() {
        Map<String, Long> m = new TreeMap<>();
        ops.forEach((k, v) -> m.put(k, v.sum()));
        return new Usage(calls.get(), condFails.get(), wcuMilli.get() / 1000.0, rcuMilli.get() / 1000.0, m);
    }

    long slowestNanos() {
        return slowestNanos.get();
    }

    long slowCalls() {
        return slow.get();
    }

    @Override
    public void beforeExecution(Context.BeforeExecution context, ExecutionAttributes attrs) {
        attrs.putAttribute(START, System.nanoTime());
    }

    @Override
    public SdkRequest modifyRequest(Context.ModifyRequest context, ExecutionAttributes attrs) {
        SdkRequest r = context.request();
        ReturnConsumedCapacity total = ReturnConsumedCapacity.TOTAL;
        if (r instanceof GetItemRequest g) {
            return g.toBuilder().returnConsumedCapacity(total).build();
        } else if (r instanceof PutItemRequest p) {
            return p.toBuilder().returnConsumedCapacity(total).build();
        } else if (r instanceof UpdateItemRequest u) {
            return u.toBuilder().returnConsumedCapacity(total).build();
        } else if (r instanceof DeleteItemRequest d) {
            return d.toBuilder().returnConsumedCapacity(total).build();
        } else if (r instanceof QueryRequest q) {
            return q.toBuilder().returnConsumedCapacity(total).build();
        } else if (r instanceof TransactWriteItemsRequest t) {
            return t.toBuilder().returnConsumedCapacity(total).build();
        }
        return r;
    }

    @Override
    public void afterExecution(Context.AfterExecution context, ExecutionAttributes attrs) {
        String op = count(attrs);
        SdkResponse r = context.response();
        if (r instanceof GetItemResponse g) {
            read(g.consumedCapacity(), consistent(context.request()));
        } else if (r instanceof QueryResponse q) {
            read(q.consumedCapacity(), consistent(context.request()));
        } else if (r instanceof PutItemResponse p) {
            write(p.consumedCapacity());
        } else if (r instanceof UpdateItemResponse u) {
            write(u.consumedCapacity());
        } else if (r instanceof DeleteItemResponse d) {
            write(d.consumedCapacity());
        } else if (op.equals("TransactWriteItems")) {
            int n = ((TransactWriteItemsRequest) context.request()).transactItems().size();
            add(wcuMilli, 2.0 * n); // as TransactWCU in counting.go (items under 1 KB)
        }
    }

    @Override
    public void onExecutionFailure(Context.FailedExecution context, ExecutionAttributes attrs) {
        String op = count(attrs);
        Throwable t = context.exception();
        boolean refused = t instanceof ConditionalCheckFailedException;
        if (t instanceof TransactionCanceledException tce && tce.hasCancellationReasons()) {
            for (CancellationReason reason : tce.cancellationReasons()) {
                refused |= "ConditionalCheckFailed".equals(reason.code());
            }
        }
        if (!refused) {
            return; // no decision reached (network, throttling, interrupted): 0 units
        }
        condFails.incrementAndGet();
        ops.computeIfAbsent(op + " failed", k -> new LongAdder()).increment();
        if (op.equals("TransactWriteItems")) {
            add(wcuMilli, 2.0 * ((TransactWriteItemsRequest) context.request()).transactItems().size());
        } else {
            add(wcuMilli, 1); // the service charges a refused write
        }
    }

    /** Counts the call and its latency; returns the operation's name. */
    private String count(ExecutionAttributes attrs) {
        Long t0 = attrs.getAttribute(START);
        if (t0 != null) {
            long d = System.nanoTime() - t0;
            if (d > SLOW_CALL_NANOS) {
                slow.incrementAndGet();
            }
            slowestNanos.accumulateAndGet(d, Math::max);
        }
        String op = attrs.getAttribute(SdkExecutionAttribute.OPERATION_NAME);
        if (op == null) {
            op = "unknown";
        }
        calls.incrementAndGet();
        ops.computeIfAbsent(op, k -> new LongAdder()).increment();
        return op;
    }

    private static boolean consistent(SdkRequest r) {
        if (r instanceof GetItemRequest g) {
            return Boolean.TRUE.equals(g.consistentRead());
        }
        if (r instanceof QueryRequest q) {
            return Boolean.TRUE.equals(q.consistentRead());
        }
        return false;
    }

    private void read(ConsumedCapacity cc, boolean consistent) {
        if (cc != null && cc.capacityUnits() != null) {
            add(rcuMilli, cc.capacityUnits());
            return;
        }
        add(rcuMilli, consistent ? 1 : 0.5); // the peer's items are far below 4 KB
    }

    private void write(ConsumedCapacity cc) {
        double w = 1;
        if (cc != null && cc.capacityUnits() != null) {
            w = Math.max(1, cc.capacityUnits());
        }
        add(wcuMilli, w);
    }

    private static void add(AtomicLong milli, double units) {
        milli.addAndGet(Math.round(units * 1000));
    }
}
