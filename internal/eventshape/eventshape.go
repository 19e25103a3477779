// Package eventshape tells the Lambda event payloads of the project's triggers apart — an
// SQS batch, a DynamoDB stream batch, an EventBridge event, a schedule's event — so that a
// handler given a foreign or empty event fails loudly naming what it got, and cmd/invoke
// can check an event file against a function's triggers in template.yaml before running it.
//
// Classification looks only at the envelope Lambda's event sources produce: the
// eventSource of Records ("aws:sqs", "aws:dynamodb", ...) and the id, detail-type and
// source of EventBridge events. It never panics, whatever the payload holds.
package eventshape

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Kind is the kind of a Lambda event payload.
type Kind string

// The kinds Classify reports.
const (
	Empty          Kind = "empty"           // no payload, null, {} or an empty Records list
	NotJSON        Kind = "not-json"        // not valid JSON
	NotObject      Kind = "not-object"      // JSON, but not an object (a string, an array, ...)
	SQS            Kind = "sqs"             // Records with eventSource aws:sqs
	DynamoDBStream Kind = "dynamodb-stream" // Records with eventSource aws:dynamodb
	Kinesis        Kind = "kinesis"         // Records with eventSource aws:kinesis
	SNS            Kind = "sns"             // Records with EventSource aws:sns
	S3             Kind = "s3"              // Records with eventSource aws:s3
	MixedRecords   Kind = "mixed-records"   // Records from several sources, or of no known source
	EventBridge    Kind = "eventbridge"     // an EventBridge event (id, detail-type, source, detail)
	Scheduled      Kind = "scheduled"       // an EventBridge schedule's event ("Scheduled Event" from aws.events)
	Unknown        Kind = "unknown"         // a JSON object of no known shape
)

// ScheduledDetailType and ScheduledSource identify the events of EventBridge schedules.
const (
	ScheduledDetailType = "Scheduled Event"
	ScheduledSource     = "aws.events"
)

// Shape is what Classify learned about a payload.
type Shape struct {
	Kind Kind
	// Records is the number of records of a Records batch.
	Records int
	// Sources are the distinct eventSource values of a Records batch, in order of appearance.
	Sources []string
	// ID, DetailType and Source are an EventBridge event's.
	ID, DetailType, Source string
	// Keys are the top-level keys of an Unknown object (sorted; at most 8).
	Keys []string
}

// IsEventBridge reports whether the shape is an EventBridge event, a schedule's included.
func (s Shape) IsEventBridge() bool { return s.Kind == EventBridge || s.Kind == Scheduled }

// String describes the shape for logs and error messages, e.g. `an SQS batch of 2
// records`, `an EventBridge event (detail-type "StockAdjusted", source "turnstile.inventory")`.
func (s Shape) String() string {
	switch s.Kind {
	case Empty:
		return "an empty event"
	case NotJSON:
		return "a payload that is not valid JSON"
	case NotObject:
		return "a JSON value that is not an object"
	case SQS:
		return "an SQS batch of " + plural(s.Records, "record")
	case DynamoDBStream:
		return "a DynamoDB stream batch of " + plural(s.Records, "record")
	case Kinesis:
		return "a Kinesis batch of " + plural(s.Records, "record")
	case SNS:
		return "an SNS notification of " + plural(s.Records, "record")
	case S3:
		return "an S3 notification of " + plural(s.Records, "record")
	case MixedRecords:
		return fmt.Sprintf("a Records batch of %s with eventSource %s", plural(s.Records, "record"), quoteList(s.Sources))
	case EventBridge:
		return fmt.Sprintf("an EventBridge event (detail-type %q, source %q)", s.DetailType, s.Source)
	case Scheduled:
		return fmt.Sprintf("an EventBridge schedule event (detail-type %q, source %q)", s.DetailType, s.Source)
	}
	if len(s.Keys) == 0 {
		return "a JSON object of unknown shape"
	}
	return "a JSON object of unknown shape (keys " + quoteList(s.Keys) + ")"
}

// LogAttrs returns the shape as slog attributes ("eventKind", and what identifies it).
func (s Shape) LogAttrs() []any {
	attrs := []any{"eventKind", string(s.Kind), "got", s.String()}
	if s.IsEventBridge() && s.ID != "" {
		attrs = append(attrs, "eventId", s.ID)
	}
	return attrs
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func quoteList(xs []string) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = fmt.Sprintf("%q", x)
	}
	return strings.Join(q, ", ")
}

// recordSources maps eventSource values of Records batches to kinds.
var recordSources = map[string]Kind{
	"aws:sqs":      SQS,
	"aws:dynamodb": DynamoDBStream,
	"aws:kinesis":  Kinesis,
	"aws:sns":      SNS,
	"aws:s3":       S3,
}

// Classify returns the shape of a Lambda event payload.
func Classify(payload []byte) Shape {
	trimmed := bytes.TrimSpace(payload)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		return Shape{Kind: Empty}
	}
	if !json.Valid(trimmed) {
		return Shape{Kind: NotJSON}
	}
	if trimmed[0] != '{' {
		return Shape{Kind: NotObject}
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &top); err != nil {
		return Shape{Kind: NotJSON}
	}
	if len(top) == 0 {
		return Shape{Kind: Empty}
	}
	if raw, ok := top["Records"]; ok {
		return classifyRecords(raw)
	}
	var eb struct {
		ID         any    `json:"id"`
		DetailType string `json:"detail-type"`
		Source     string `json:"source"`
	}
	_, hasDT := top["detail-type"]
	_, hasSource := top["source"]
	_, hasDetail := top["detail"]
	if hasDT && hasSource && hasDetail {
		_ = json.Unmarshal(trimmed, &eb)
		s := Shape{Kind: EventBridge, DetailType: eb.DetailType, Source: eb.Source}
		if id, ok := eb.ID.(string); ok {
			s.ID = id
		}
		if eb.DetailType == ScheduledDetailType && eb.Source == ScheduledSource {
			s.Kind = Scheduled
		}
		return s
	}
	s := Shape{Kind: Unknown}
	for k := range top {
		s.Keys = append(s.Keys, k)
	}
	sort.Strings(s.Keys)
	if len(s.Keys) > 8 {
		s.Keys = s.Keys[:8]
	}
	return s
}

func classifyRecords(raw json.RawMessage) Shape {
	var recs []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &recs); err != nil {
		return Shape{Kind: MixedRecords, Sources: []string{"(Records is not an array of objects)"}}
	}
	if len(recs) == 0 {
		return Shape{Kind: Empty}
	}
	s := Shape{Records: len(recs)}
	seen := map[string]bool{}
	for _, r := range recs {
		src := ""
		for _, key := range []string{"eventSource", "EventSource"} {
			if v, ok := r[key]; ok {
				_ = json.Unmarshal(v, &src)
				break
			}
		}
		if !seen[src] {
			seen[src] = true
			s.Sources = append(s.Sources, src)
		}
	}
	if len(s.Sources) == 1 {
		if k, ok := recordSources[s.Sources[0]]; ok {
			s.Kind = k
			return s
		}
	}
	s.Kind = MixedRecords
	return s
}

// TriggerKinds returns the event kinds a SAM event source type (the Type of an entry of a
// function's Events in template.yaml) delivers, or nil for a type this package does not know.
func TriggerKinds(samEventType string) []Kind {
	switch samEventType {
	case "SQS":
		return []Kind{SQS}
	case "DynamoDB":
		return []Kind{DynamoDBStream}
	case "Kinesis":
		return []Kind{Kinesis}
	case "SNS":
		return []Kind{SNS}
	case "S3":
		return []Kind{S3}
	case "EventBridgeRule", "CloudWatchEvent":
		return []Kind{EventBridge, Scheduled}
	case "Schedule", "ScheduleV2":
		return []Kind{Scheduled}
	}
	return nil
}

// InvalidEventError is the error a handler returns for an event it cannot handle: a foreign
// or empty event, or one whose content is malformed. Lambda reports it with errorType
// "InvalidEventError". It is permanent: retrying the same event cannot succeed, so it ends
// in the trigger's dead-letter queue or on-failure destination for a human to look at.
type InvalidEventError struct {
	Function string // the function's name in metrics ("orderprocessor", ...)
	EventID  string // the event's id, if it has one
	Got      string // what the event is, e.g. Shape.String()
	Want     string // what the function handles, e.g. "an SQS batch"
	Err      error  // the field error of a malformed event, if that is the cause
}

func (e *InvalidEventError) Error() string {
	var b strings.Builder
	b.WriteString(e.Function)
	b.WriteString(": ")
	if e.EventID != "" {
		b.WriteString("event " + e.EventID + ": ")
	}
	switch {
	case e.Err != nil:
		b.WriteString(e.Err.Error())
	default:
		b.WriteString("got " + e.Got)
		if e.Want != "" {
			b.WriteString("; want " + e.Want)
		}
	}
	return b.String()
}

// Unwrap returns the cause (a *shop.FieldError for malformed content), or nil.
func (e *InvalidEventError) Unwrap() error { return e.Err }
