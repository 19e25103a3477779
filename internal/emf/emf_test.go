package emf

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

var fixedClock = func() time.Time { return time.UnixMilli(1763630100123) }

func TestGolden(t *testing.T) {
	tests := []struct {
		name   string
		record func(l *Logger)
	}{
		{"single", func(l *Logger) {
			l.AddDimensionSet(Dimension{"Function", "orderprocessor"})
			l.PutMetric("LockWait", 12.5, Milliseconds)
			l.PutProperty("requestId", "c6af9ac6-7b61-11e6-9a41-93e8deadbeef")
		}},
		{"no_dimensions", func(l *Logger) {
			l.PutMetric("AbandonedLeases", 1, Count)
		}},
		{"repeated_values", func(l *Logger) {
			l.AddDimensionSet(Dimension{"Function", "orderprocessor"})
			for _, v := range []float64{3, 4.25, 0} {
				l.PutMetric("HoldTime", v, Milliseconds)
			}
			l.PutMetric("Contention", 2, Count)
		}},
		{"dimension_sets", func(l *Logger) {
			l.AddDimensionSet(Dimension{"Service", "turnstile"}, Dimension{"Function", "janitor"})
			l.AddDimensionSet(Dimension{"Service", "turnstile"})
			l.AddDimensionSet()
			l.PutMetric("SweptRows", 17, Count)
			l.PutProperty("stage", "dev")
			l.PutProperty("detail", map[string]any{"table": "turnstile-dev-locks", "segments": 1})
		}},
		{"high_resolution", func(l *Logger) {
			l.PutMetricResolution("LockWait", 0.75, Milliseconds, HighResolution)
			l.PutMetric("Acquired", 1, Count)
		}},
		{"more_than_100_metrics", func(l *Logger) {
			l.AddDimensionSet(Dimension{"Function", "bench"})
			for i := range 103 {
				l.PutMetric(fmt.Sprintf("M%03d", i), float64(i), Count)
			}
		}},
		{"more_than_100_values", func(l *Logger) {
			for i := range 205 {
				l.PutMetric("Latency", float64(i), Milliseconds)
			}
			l.PutMetric("Once", 1, None)
		}},
		{"name_collision", func(l *Logger) {
			l.AddDimensionSet(Dimension{"Outcome", "reserved"})
			l.PutMetric("Orders", 1, Count)
			l.PutProperty("Orders", "ignored: the metric value wins")
			l.PutProperty("Outcome", "ignored: the dimension value wins")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			l := New(&buf, "turnstile", WithClock(fixedClock))
			tt.record(l)
			if err := l.Flush(); err != nil {
				t.Fatalf("Flush: %v", err)
			}
			checkDocuments(t, buf.Bytes())
			golden(t, filepath.Join("testdata", tt.name+".golden"), buf.Bytes())
		})
	}
}

// checkDocuments verifies every line against the EMF rules that CloudWatch enforces.
func checkDocuments(t *testing.T, out []byte) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	for i, line := range lines {
		var doc map[string]any
		if err := json.Unmarshal([]byte(line), &doc); err != nil {
			t.Fatalf("line %d is not JSON: %v\n%s", i, err, line)
		}
		aws, ok := doc["_aws"].(map[string]any)
		if !ok {
			t.Fatalf("line %d: no _aws object", i)
		}
		if _, ok := aws["Timestamp"].(float64); !ok {
			t.Fatalf("line %d: _aws.Timestamp missing", i)
		}
		dirs := aws["CloudWatchMetrics"].([]any)
		for _, d := range dirs {
			dir := d.(map[string]any)
			metrics := dir["Metrics"].([]any)
			if len(metrics) > MaxMetricsPerDocument {
				t.Errorf("line %d: %d metrics in one directive", i, len(metrics))
			}
			for _, m := range metrics {
				name := m.(map[string]any)["Name"].(string)
				v, ok := doc[name]
				if !ok {
					t.Errorf("line %d: metric %s has no value", i, name)
				}
				if vs, ok := v.([]any); ok && len(vs) > MaxValuesPerMetric {
					t.Errorf("line %d: metric %s has %d values", i, name, len(vs))
				}
			}
			for _, set := range dir["Dimensions"].([]any) {
				for _, n := range set.([]any) {
					if _, ok := doc[n.(string)].(string); !ok {
						t.Errorf("line %d: dimension %v has no string value", i, n)
					}
				}
			}
		}
	}
}

func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/emf -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (go test ./internal/emf -update rewrites it)\n got: %s\nwant: %s", path, got, want)
	}
}

func TestFlushClearsMetricsKeepsContext(t *testing.T) {
	var buf bytes.Buffer
	l := New(&buf, "turnstile", WithClock(fixedClock))
	l.AddDimensionSet(Dimension{"Function", "janitor"})
	l.PutProperty("requestId", "r1")
	l.PutMetric("A", 1, Count)
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	if l.Len() != 0 {
		t.Fatalf("Len after Flush = %d", l.Len())
	}
	buf.Reset()
	if err := l.Flush(); err != nil || buf.Len() != 0 {
		t.Fatalf("empty Flush wrote %q, err %v", buf.String(), err)
	}
	l.PutMetric("B", 2, Count)
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc["Function"] != "janitor" || doc["requestId"] != "r1" || doc["B"] != 2.0 {
		t.Errorf("second document lost context: %s", buf.String())
	}
	if _, ok := doc["A"]; ok {
		t.Errorf("metric A flushed twice: %s", buf.String())
	}
}

func TestInvalidInputIsReported(t *testing.T) {
	tests := []struct {
		name   string
		record func(l *Logger)
		want   string
	}{
		{"nan", func(l *Logger) { l.PutMetric("X", math.NaN(), Count) }, "not a finite number"},
		{"inf", func(l *Logger) { l.PutMetric("X", math.Inf(1), Count) }, "not a finite number"},
		{"empty metric", func(l *Logger) { l.PutMetric("", 1, Count) }, "empty metric name"},
		{"reserved", func(l *Logger) { l.PutProperty("_aws", 1) }, "reserved"},
		{"too many dimensions", func(l *Logger) {
			dims := make([]Dimension, 31)
			for i := range dims {
				dims[i] = Dimension{fmt.Sprintf("D%d", i), "v"}
			}
			l.AddDimensionSet(dims...)
		}, "at most 30"},
		{"unencodable property", func(l *Logger) {
			l.PutMetric("Y", 1, Count)
			l.PutProperty("ch", make(chan int))
		}, "encoding ch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			l := New(&buf, "turnstile", WithClock(fixedClock))
			tt.record(l)
			err := l.Flush()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Flush error = %v, want one containing %q", err, tt.want)
			}
			if strings.Contains(buf.String(), `"ch"`) {
				t.Errorf("a half-encoded document was written: %s", buf.String())
			}
		})
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestWriteError(t *testing.T) {
	l := New(failingWriter{}, "turnstile")
	l.PutMetric("X", 1, Count)
	if err := l.Flush(); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("Flush error = %v", err)
	}
}

func TestSetTimestamp(t *testing.T) {
	var buf bytes.Buffer
	l := New(&buf, "ns", WithClock(fixedClock))
	l.SetTimestamp(time.UnixMilli(42))
	l.PutMetric("X", 1, Count)
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(buf.String(), `{"_aws":{"Timestamp":42,`) {
		t.Errorf("timestamp not applied: %s", buf.String())
	}
}

func TestConcurrentUse(t *testing.T) {
	var buf bytes.Buffer
	l := New(&buf, "ns", WithClock(fixedClock))
	done := make(chan struct{})
	for g := range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 50 {
				l.PutMetric("Shared", float64(i), Count)
				l.PutProperty(fmt.Sprintf("p%d", g), i)
			}
		}()
	}
	for range 8 {
		<-done
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	// 400 values of one metric: 4 documents of 100 values each.
	if n := strings.Count(buf.String(), "\n"); n != 4 {
		t.Errorf("got %d documents, want 4", n)
	}
}
