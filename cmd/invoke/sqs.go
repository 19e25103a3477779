package main

import (
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
)

// sentMessage is one message a function sent to a local queue stand-in.
type sentMessage struct {
	QueueURL     string `json:"queueUrl"`
	MessageID    string `json:"messageId"`
	Body         string `json:"body"`
	DelaySeconds int    `json:"delaySeconds,omitempty"`
}

// visibilityChange is one ChangeMessageVisibility a function made on a local queue.
type visibilityChange struct {
	QueueURL          string
	ReceiptHandle     string
	VisibilityTimeout int
}

// fakeSQS is a loopback stand-in for the SQS queues of the template: it accepts SendMessage,
// SendMessageBatch, GetQueueUrl, GetQueueAttributes and ChangeMessageVisibility (the order
// processor shortens the visibility of the messages it returns) in the AWS JSON protocol the
// SDK speaks, records the messages and reports each one; visibility changes are recorded
// and summed up once after the invocation (see visibilityChanges). Functions reach it
// through AWS_ENDPOINT_URL_SQS.
type fakeSQS struct {
	srv     *http.Server
	ln      net.Listener
	account string
	queues  map[string]bool // known queue URLs
	report  io.Writer

	mu         sync.Mutex
	sent       []sentMessage
	visibility []visibilityChange
}

func startFakeSQS(account string, report io.Writer) (*fakeSQS, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &fakeSQS{ln: ln, account: account, queues: map[string]bool{}, report: report}
	f.srv = &http.Server{Handler: http.HandlerFunc(f.serve)}
	go func() { _ = f.srv.Serve(ln) }()
	return f, nil
}

// URL is the endpoint base URL (AWS_ENDPOINT_URL_SQS).
func (f *fakeSQS) URL() string { return "http://" + f.ln.Addr().String() }

func (f *fakeSQS) addQueue(url string) { f.queues[url] = true }

func (f *fakeSQS) close() { _ = f.srv.Close() }

func (f *fakeSQS) messages() []sentMessage {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]sentMessage(nil), f.sent...)
}

func (f *fakeSQS) visibilityChanges() []visibilityChange {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]visibilityChange(nil), f.visibility...)
}

type sendEntry struct {
	ID           string `json:"Id"`
	MessageBody  string
	DelaySeconds int
}

func (f *fakeSQS) serve(w http.ResponseWriter, r *http.Request) {
	op := strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "AmazonSQS.")
	var in struct {
		QueueURL  string `json:"QueueUrl"`
		QueueName string
		sendEntry
		Entries           []sendEntry
		ReceiptHandle     string
		VisibilityTimeout int
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		sqsError(w, "InvalidParameterValue", "cannot decode request: "+err.Error())
		return
	}
	if op != "GetQueueUrl" && !f.queues[in.QueueURL] {
		sqsError(w, "QueueDoesNotExist", "The specified queue does not exist: "+in.QueueURL)
		return
	}
	switch op {
	case "SendMessage":
		id := f.record(in.QueueURL, in.sendEntry)
		reply(w, map[string]string{"MessageId": id, "MD5OfMessageBody": md5Hex(in.MessageBody)})
	case "SendMessageBatch":
		var ok []map[string]string
		for _, e := range in.Entries {
			id := f.record(in.QueueURL, e)
			ok = append(ok, map[string]string{"Id": e.ID, "MessageId": id, "MD5OfMessageBody": md5Hex(e.MessageBody)})
		}
		reply(w, map[string]any{"Successful": ok, "Failed": []any{}})
	case "GetQueueUrl":
		url := f.URL() + "/" + f.account + "/" + in.QueueName
		if !f.queues[url] {
			sqsError(w, "QueueDoesNotExist", "The specified queue does not exist: "+in.QueueName)
			return
		}
		reply(w, map[string]string{"QueueUrl": url})
	case "GetQueueAttributes":
		reply(w, map[string]any{"Attributes": map[string]string{}})
	case "ChangeMessageVisibility":
		// Any receipt handle is taken: the stand-in delivers nothing, and the event file's
		// messages are the ones the function returns.
		f.mu.Lock()
		f.visibility = append(f.visibility, visibilityChange{QueueURL: in.QueueURL, ReceiptHandle: in.ReceiptHandle, VisibilityTimeout: in.VisibilityTimeout})
		f.mu.Unlock()
		reply(w, map[string]any{})
	default:
		sqsError(w, "UnsupportedOperation", "the local SQS stand-in does not implement "+op)
	}
}

func (f *fakeSQS) record(queueURL string, e sendEntry) string {
	m := sentMessage{QueueURL: queueURL, MessageID: newMessageID(), Body: e.MessageBody, DelaySeconds: e.DelaySeconds}
	f.mu.Lock()
	f.sent = append(f.sent, m)
	f.mu.Unlock()
	queue := queueURL[strings.LastIndex(queueURL, "/")+1:]
	fmt.Fprintf(f.report, "invoke: message sent to %s: %s\n", queue, e.MessageBody)
	return m.MessageID
}

func reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	_ = json.NewEncoder(w).Encode(v)
}

func sqsError(w http.ResponseWriter, code, msg string) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("x-amzn-query-error", "AWS.SimpleQueueService."+code+";Sender")
	w.WriteHeader(http.StatusBadRequest)
	_ = json.NewEncoder(w).Encode(map[string]string{"__type": "com.amazonaws.sqs#" + code, "message": msg})
}

func md5Hex(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

func newMessageID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
