package demo

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// queue is an in-process stand-in for an SQS standard queue with a redrive policy: a
// received message is invisible for the visibility timeout and comes back unless it is
// deleted; a message received more than maxReceive times moves to the dead-letter queue
// instead of being delivered again. Like a standard queue it may deliver a message twice
// (see sendOptions.deliverTwice).
type queue struct {
	name, arn  string
	region     string
	visibility time.Duration
	maxReceive int

	mu      sync.Mutex
	seq     int
	msgs    []*sqsMessage // not deleted, not dead-lettered; in send order
	dlq     []*sqsMessage
	deleted int
	done    []*sqsMessage // deleted messages, for the per-order figures
	vis     int           // ChangeMessageVisibility calls that applied
	wake    chan struct{} // closed and replaced whenever something may have become visible
}

type sqsMessage struct {
	id, body     string
	sentAt       time.Time
	firstReceive time.Time
	receives     int
	visibleAt    time.Time
	receipt      string // receipt handle of the latest receive
	deliverTwice bool   // the next receive leaves the message visible: a duplicate delivery
	secondCopy   bool   // the next receive is the duplicate delivery
	crash        bool   // its first receive goes to a doomed environment (see sqsMapping)
}

// sendOptions describe how a message is sent.
type sendOptions struct {
	deliverTwice bool // the first receive hands it out without hiding it
	crash        bool // its first receive goes to an environment that dies on it
}

// delivery is one received message as the Lambda event source mapping hands it on.
type delivery struct {
	msg events.SQSMessage
}

func newQueue(name, region string, visibility time.Duration, maxReceive int) *queue {
	return &queue{
		name: name, region: region,
		arn:        fmt.Sprintf("arn:aws:sqs:%s:%s:%s", region, accountID, name),
		visibility: visibility, maxReceive: maxReceive,
		wake: make(chan struct{}),
	}
}

// send enqueues body and returns the message id. deliverTwice makes the first receive
// hand the message out without hiding it, so a second poller receives it too (SQS
// standard queues deliver at least once).
func (q *queue) send(body string, o sendOptions) string {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.seq++
	m := &sqsMessage{
		id:   fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", q.seq, q.seq%0xffff, q.seq%0xfff, q.seq%0xfff, q.seq),
		body: body, sentAt: time.Now(), deliverTwice: o.deliverTwice, crash: o.crash,
	}
	q.msgs = append(q.msgs, m)
	q.signal()
	return m.id
}

func (q *queue) signal() {
	close(q.wake)
	q.wake = make(chan struct{})
}

// freshCrash picks the messages whose first receive is a doomed environment's.
func freshCrash(m *sqsMessage) bool { return m.crash && m.receives == 0 }

// notFreshCrash picks every other message.
func notFreshCrash(m *sqsMessage) bool { return !freshCrash(m) }

// receive returns up to limit visible messages that pick accepts, waiting up to window
// after the first one for more (the event source mapping's batching window) and until
// ctx ends for the first.
func (q *queue) receive(ctx context.Context, limit int, window time.Duration, pick func(*sqsMessage) bool) []delivery {
	var out []delivery
	var deadline time.Time
	for {
		q.mu.Lock()
		now := time.Now()
		next := time.Time{}
		keep := q.msgs[:0]
		for _, m := range q.msgs {
			if len(out) >= limit || m.visibleAt.After(now) || !pick(m) {
				if m.visibleAt.After(now) && (next.IsZero() || m.visibleAt.Before(next)) {
					next = m.visibleAt
				}
				keep = append(keep, m)
				continue
			}
			if m.receives >= q.maxReceive {
				q.dlq = append(q.dlq, m) // redrive policy: maxReceiveCount exceeded
				continue
			}
			m.receives++
			if m.firstReceive.IsZero() {
				m.firstReceive = now
			}
			m.receipt = fmt.Sprintf("%s#%d#%s", m.id, m.receives, randomHex(8))
			twice := m.deliverTwice || m.secondCopy
			m.secondCopy = m.deliverTwice
			if m.deliverTwice {
				m.deliverTwice = false // visible again at once: another poller gets it too
			} else {
				m.visibleAt = now.Add(q.visibility)
			}
			d := delivery{msg: q.event(m)}
			if twice {
				// A standard queue does not keep order: put the twice-delivered message
				// first, so that both copies are worked on at the same time.
				out = append([]delivery{d}, out...)
			} else {
				out = append(out, d)
			}
			keep = append(keep, m)
		}
		q.msgs = keep
		wake := q.wake
		q.mu.Unlock()

		if len(out) >= limit {
			return out
		}
		if len(out) > 0 && deadline.IsZero() {
			deadline = now.Add(window)
		}
		if !deadline.IsZero() && !now.Before(deadline) {
			return out
		}
		wait := 250 * time.Millisecond
		if !next.IsZero() {
			wait = min(wait, time.Until(next))
		}
		if !deadline.IsZero() {
			wait = min(wait, time.Until(deadline))
		}
		t := time.NewTimer(max(wait, time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return out
		case <-wake:
			t.Stop()
		case <-t.C:
		}
	}
}

// event renders a message as Lambda's SQS event source mapping delivers it.
func (q *queue) event(m *sqsMessage) events.SQSMessage {
	sum := md5.Sum([]byte(m.body))
	return events.SQSMessage{
		MessageId:     m.id,
		ReceiptHandle: m.receipt,
		Body:          m.body,
		Md5OfBody:     hex.EncodeToString(sum[:]),
		Attributes: map[string]string{
			"ApproximateReceiveCount":          strconv.Itoa(m.receives),
			"SentTimestamp":                    strconv.FormatInt(m.sentAt.UnixMilli(), 10),
			"SenderId":                         "AIDAIENQZJOLO23YVJ4VO",
			"ApproximateFirstReceiveTimestamp": strconv.FormatInt(m.firstReceive.UnixMilli(), 10),
		},
		MessageAttributes: map[string]events.SQSMessageAttribute{},
		EventSourceARN:    q.arn,
		EventSource:       "aws:sqs",
		AWSRegion:         q.region,
	}
}

// delete removes the message whose latest receipt handle is receipt. A stale handle (the
// message was received again since) deletes nothing, as in SQS once the visibility
// timeout expired.
func (q *queue) delete(receipt string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, m := range q.msgs {
		if m.receipt == receipt {
			q.msgs = append(q.msgs[:i], q.msgs[i+1:]...)
			q.deleted++
			q.done = append(q.done, m)
			return true
		}
	}
	return false
}

// ChangeMessageVisibility is SQS's call, for the order processor's handler (its
// handler.VisibilityChanger): the message whose latest receipt handle is given becomes
// visible after VisibilityTimeout seconds. A stale handle changes nothing (SQS answers
// ReceiptHandleIsInvalid or ignores it; the handler only logs a failure either way).
func (q *queue) ChangeMessageVisibility(_ context.Context, in *sqs.ChangeMessageVisibilityInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	if aws.ToString(in.QueueUrl) != q.url() {
		return nil, fmt.Errorf("demo sqs: ChangeMessageVisibility on %q: no such queue (want %s)", aws.ToString(in.QueueUrl), q.url())
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, m := range q.msgs {
		if m.receipt == aws.ToString(in.ReceiptHandle) {
			m.visibleAt = time.Now().Add(time.Duration(in.VisibilityTimeout) * time.Second)
			q.vis++
			q.signal()
			return &sqs.ChangeMessageVisibilityOutput{}, nil
		}
	}
	return &sqs.ChangeMessageVisibilityOutput{}, nil
}

// url is the queue's URL, as ORDERS_QUEUE_URL would name it.
func (q *queue) url() string {
	return fmt.Sprintf("https://sqs.%s.amazonaws.com/%s/%s", q.region, accountID, q.name)
}

// finished returns the messages deleted and dead-lettered so far (copies).
func (q *queue) finished() (deleted, dead []sqsMessage) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, m := range q.done {
		deleted = append(deleted, *m)
	}
	for _, m := range q.dlq {
		dead = append(dead, *m)
	}
	return deleted, dead
}

// stats returns how many messages are still in the queue (visible or in flight), in the
// dead-letter queue, and deleted.
func (q *queue) stats() (pending, dead, deleted int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.msgs), len(q.dlq), q.deleted
}
