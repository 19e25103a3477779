// Package emf writes CloudWatch Embedded Metric Format (EMF) documents: structured JSON log
// lines from which CloudWatch Logs extracts metrics, so a Lambda function publishes metrics by
// printing to stdout, without PutMetricData calls.
//
// A Logger collects metrics, dimensions and properties, and Flush writes them as JSON lines:
//
//	{"_aws":{"Timestamp":1763630100000,"CloudWatchMetrics":[{"Namespace":"turnstile",
//	  "Dimensions":[["Function"]],"Metrics":[{"Name":"LockWait","Unit":"Milliseconds"}]}]},
//	  "Function":"orderprocessor","LockWait":12.5,"requestId":"..."}
//
// (one line per document; wrapped here). CloudWatch accepts at most 100 metric definitions per
// document and 100 values per metric, so Flush splits larger sets over several documents.
// See https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html
package emf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"time"
)

// Limits of the EMF specification.
const (
	MaxMetricsPerDocument = 100 // metric definitions in one CloudWatchMetrics directive
	MaxValuesPerMetric    = 100 // values of one metric in one document
	MaxDimensionsPerSet   = 30  // dimension names in one dimension set
)

// Unit is a CloudWatch metric unit.
type Unit string

// CloudWatch metric units.
const (
	None               Unit = "None"
	Count              Unit = "Count"
	Percent            Unit = "Percent"
	Seconds            Unit = "Seconds"
	Milliseconds       Unit = "Milliseconds"
	Microseconds       Unit = "Microseconds"
	Bytes              Unit = "Bytes"
	Kilobytes          Unit = "Kilobytes"
	Megabytes          Unit = "Megabytes"
	Gigabytes          Unit = "Gigabytes"
	Terabytes          Unit = "Terabytes"
	Bits               Unit = "Bits"
	Kilobits           Unit = "Kilobits"
	Megabits           Unit = "Megabits"
	Gigabits           Unit = "Gigabits"
	Terabits           Unit = "Terabits"
	BytesPerSecond     Unit = "Bytes/Second"
	KilobytesPerSecond Unit = "Kilobytes/Second"
	MegabytesPerSecond Unit = "Megabytes/Second"
	GigabytesPerSecond Unit = "Gigabytes/Second"
	TerabytesPerSecond Unit = "Terabytes/Second"
	BitsPerSecond      Unit = "Bits/Second"
	KilobitsPerSecond  Unit = "Kilobits/Second"
	MegabitsPerSecond  Unit = "Megabits/Second"
	GigabitsPerSecond  Unit = "Gigabits/Second"
	TerabitsPerSecond  Unit = "Terabits/Second"
	CountPerSecond     Unit = "Count/Second"
)

// Resolution is a metric's storage resolution in seconds.
type Resolution int

// Storage resolutions.
const (
	StandardResolution Resolution = 60 // one-minute granularity (the default)
	HighResolution     Resolution = 1  // one-second granularity
)

// Dimension is a name/value pair that identifies a metric.
type Dimension struct {
	Name  string
	Value string
}

// metric is one named metric with the values recorded since the last flush.
type metric struct {
	name       string
	unit       Unit
	resolution Resolution
	values     []float64
}

// property is a root-level key that is logged but is not a metric or dimension.
type property struct {
	key   string
	value any
}

// Logger collects metrics for one namespace and writes them as EMF documents. It is safe for
// concurrent use. Metrics are cleared by Flush; dimensions and properties are kept.
type Logger struct {
	mu        sync.Mutex
	w         io.Writer
	namespace string
	now       func() time.Time
	timestamp time.Time // fixed timestamp for the next flush; zero = now()

	dimSets  [][]string        // dimension sets, each a list of names
	dimVals  map[string]string // dimension values by name
	dimOrder []string          // dimension names in first-set order
	metrics  []*metric
	byName   map[string]*metric
	props    []property
	propIdx  map[string]int
	errs     []error
}

// Option configures a Logger.
type Option func(*Logger)

// WithClock sets the clock that stamps documents (the default is time.Now).
func WithClock(now func() time.Time) Option {
	return func(l *Logger) { l.now = now }
}

// New returns a Logger that writes documents for namespace to w.
func New(w io.Writer, namespace string, opts ...Option) *Logger {
	l := &Logger{
		w:         w,
		namespace: namespace,
		now:       time.Now,
		dimVals:   map[string]string{},
		byName:    map[string]*metric{},
		propIdx:   map[string]int{},
	}
	for _, o := range opts {
		o(l)
	}
	return l
}

// Namespace returns the CloudWatch namespace of the logger's metrics.
func (l *Logger) Namespace() string { return l.namespace }

// AddDimensionSet adds one dimension set: the metrics are aggregated over exactly these
// dimensions. A name used in several sets must have one value (the last one given wins).
// An empty call adds a set without dimensions (a namespace-wide aggregate).
func (l *Logger) AddDimensionSet(dims ...Dimension) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(dims) > MaxDimensionsPerSet {
		l.errs = append(l.errs, fmt.Errorf("emf: a dimension set holds at most %d dimensions, got %d", MaxDimensionsPerSet, len(dims)))
		return
	}
	names := make([]string, 0, len(dims))
	for _, d := range dims {
		if err := l.checkKey("dimension", d.Name); err != nil {
			l.errs = append(l.errs, err)
			return
		}
		if _, seen := l.dimVals[d.Name]; !seen {
			l.dimOrder = append(l.dimOrder, d.Name)
		}
		l.dimVals[d.Name] = d.Value
		names = append(names, d.Name)
	}
	l.dimSets = append(l.dimSets, names)
}

// ResetDimensions removes every dimension set.
func (l *Logger) ResetDimensions() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dimSets, l.dimOrder = nil, nil
	l.dimVals = map[string]string{}
}

// PutMetric records a value of the named metric with standard resolution. Recording the same
// name again adds a value (CloudWatch receives all values of the document). NaN and
// infinite values cannot be expressed in JSON: they are dropped and reported by Flush.
func (l *Logger) PutMetric(name string, value float64, unit Unit) {
	l.PutMetricResolution(name, value, unit, StandardResolution)
}

// PutMetricResolution is PutMetric with an explicit storage resolution.
func (l *Logger) PutMetricResolution(name string, value float64, unit Unit, res Resolution) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.checkKey("metric", name); err != nil {
		l.errs = append(l.errs, err)
		return
	}
	if math.IsNaN(value) || math.IsInf(value, 0) {
		l.errs = append(l.errs, fmt.Errorf("emf: metric %q: value %v is not a finite number", name, value))
		return
	}
	m, ok := l.byName[name]
	if !ok {
		m = &metric{name: name, unit: unit, resolution: res}
		l.byName[name] = m
		l.metrics = append(l.metrics, m)
	}
	m.values = append(m.values, value)
}

// PutProperty records a root-level property (for example a request id) that is logged with
// every document but is not a metric. Values must be JSON-encodable.
func (l *Logger) PutProperty(key string, value any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.checkKey("property", key); err != nil {
		l.errs = append(l.errs, err)
		return
	}
	if i, ok := l.propIdx[key]; ok {
		l.props[i].value = value
		return
	}
	l.propIdx[key] = len(l.props)
	l.props = append(l.props, property{key, value})
}

// SetTimestamp fixes the timestamp of the next flushed documents (the default is the time of
// the flush). A zero time restores the default.
func (l *Logger) SetTimestamp(t time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.timestamp = t
}

// Len returns the number of distinct metrics waiting to be flushed.
func (l *Logger) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.metrics)
}

func (l *Logger) checkKey(kind, key string) error {
	switch {
	case key == "":
		return fmt.Errorf("emf: empty %s name", kind)
	case key == "_aws":
		return fmt.Errorf("emf: %s name %q is reserved", kind, key)
	case len(key) > 1024:
		return fmt.Errorf("emf: %s name %.32q... longer than 1024 bytes", kind, key)
	}
	return nil
}

// Flush writes the recorded metrics as EMF documents, one JSON line each, and clears them.
// It writes nothing when no metric was recorded. Documents hold at most MaxMetricsPerDocument
// metrics and MaxValuesPerMetric values per metric; larger sets span several documents. The
// error joins any invalid input recorded since the last flush and a write error.
func (l *Logger) Flush() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	errs := l.errs
	l.errs = nil
	if len(l.metrics) > 0 {
		ts := l.timestamp
		if ts.IsZero() {
			ts = l.now()
		}
		var buf bytes.Buffer
		for _, doc := range l.split() {
			if err := l.encode(&buf, ts, doc); err != nil {
				errs = append(errs, err)
				break
			}
		}
		if buf.Len() > 0 {
			if _, err := l.w.Write(buf.Bytes()); err != nil {
				errs = append(errs, fmt.Errorf("emf: write: %w", err))
			}
		}
	}
	l.metrics = nil
	l.byName = map[string]*metric{}
	return errors.Join(errs...)
}

// chunk is the part of one metric that goes into one document.
type chunk struct {
	m      *metric
	values []float64
}

// split distributes the metrics over documents: document i carries values
// [i*100, (i+1)*100) of every metric that has them, in groups of at most 100 metrics.
func (l *Logger) split() [][]chunk {
	var docs [][]chunk
	for round := 0; ; round++ {
		lo := round * MaxValuesPerMetric
		var cur []chunk
		more := false
		for _, m := range l.metrics {
			if lo >= len(m.values) {
				continue
			}
			more = true
			hi := min(lo+MaxValuesPerMetric, len(m.values))
			cur = append(cur, chunk{m, m.values[lo:hi]})
			if len(cur) == MaxMetricsPerDocument {
				docs = append(docs, cur)
				cur = nil
			}
		}
		if len(cur) > 0 {
			docs = append(docs, cur)
		}
		if !more {
			return docs
		}
	}
}

// metricDefinition is one entry of a directive's Metrics list.
type metricDefinition struct {
	Name              string `json:"Name"`
	Unit              Unit   `json:"Unit,omitempty"`
	StorageResolution int    `json:"StorageResolution,omitempty"`
}

type directive struct {
	Namespace  string             `json:"Namespace"`
	Dimensions [][]string         `json:"Dimensions"`
	Metrics    []metricDefinition `json:"Metrics"`
}

type awsMetadata struct {
	Timestamp         int64       `json:"Timestamp"`
	CloudWatchMetrics []directive `json:"CloudWatchMetrics"`
}

// encode appends one document to buf: "_aws" first, then dimension values, metric values and
// properties in the order they were first given, so the output is stable.
func (l *Logger) encode(buf *bytes.Buffer, ts time.Time, doc []chunk) error {
	dims := l.dimSets
	if len(dims) == 0 {
		dims = [][]string{{}} // one empty dimension set: the metrics have no dimensions
	}
	d := directive{Namespace: l.namespace, Dimensions: dims}
	for _, c := range doc {
		def := metricDefinition{Name: c.m.name, Unit: c.m.unit}
		if c.m.resolution == HighResolution {
			def.StorageResolution = int(HighResolution)
		}
		d.Metrics = append(d.Metrics, def)
	}
	meta := awsMetadata{Timestamp: ts.UnixMilli(), CloudWatchMetrics: []directive{d}}

	start := buf.Len()
	seen := map[string]bool{"_aws": true}
	buf.WriteByte('{')
	if err := writeField(buf, "_aws", meta, false); err != nil {
		return err
	}
	var err error
	put := func(key string, v any) {
		if err != nil || seen[key] {
			return // a key already written (dimension and metric share a name): first wins
		}
		seen[key] = true
		err = writeField(buf, key, v, true)
	}
	for _, name := range l.dimOrder {
		put(name, l.dimVals[name])
	}
	for _, c := range doc {
		var v any = c.values
		if len(c.values) == 1 {
			v = c.values[0]
		}
		put(c.m.name, v)
	}
	for _, p := range l.props {
		put(p.key, p.value)
	}
	if err != nil {
		buf.Truncate(start)
		return err
	}
	buf.WriteString("}\n")
	return nil
}

func writeField(buf *bytes.Buffer, key string, v any, comma bool) error {
	k, _ := json.Marshal(key)
	val, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("emf: encoding %s: %w", key, err)
	}
	if comma {
		buf.WriteByte(',')
	}
	buf.Write(k)
	buf.WriteByte(':')
	buf.Write(val)
	return nil
}
