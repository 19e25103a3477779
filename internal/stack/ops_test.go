package stack

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	inventoryupdater "github.com/turnstile-locks/turnstile/functions/inventoryupdater/handler"
	janitor "github.com/turnstile-locks/turnstile/functions/janitor/handler"
	orderprocessor "github.com/turnstile-locks/turnstile/functions/orderprocessor/handler"
	"github.com/turnstile-locks/turnstile/internal/emf"
	"github.com/turnstile-locks/turnstile/internal/obs"
	"github.com/turnstile-locks/turnstile/internal/shop"
	"github.com/turnstile-locks/turnstile/internal/template"
)

// emitted lists, for every function of the template, the name its handler passes to
// obs.Metrics (the Function dimension) and the metrics its code records, by the Go constants:
// renaming a constant changes what the alarms and the dashboard must name, and a metric
// dropped here can no longer be alarmed on. shop's metrics reach CloudWatch through the
// handlers' per-invocation loggers (shop.ContextWithMetrics).
var emitted = []struct {
	logicalID string
	function  string
	metrics   []string
}{
	{"OrderProcessorFunction", orderprocessor.FunctionName, []string{
		shop.MetricLockWait, shop.MetricLockHold, shop.MetricContention, shop.MetricLeaseLost,
		shop.MetricOrdersReserved, shop.MetricOrdersRejected, shop.MetricOrdersDuplicate,
		orderprocessor.MetricMessages, orderprocessor.MetricMessagesMalformed, orderprocessor.MetricMessagesRetried,
	}},
	{"InventoryUpdaterFunction", inventoryupdater.FunctionName, []string{
		shop.MetricLockWait, shop.MetricLockHold, shop.MetricContention, shop.MetricLeaseLost,
		shop.MetricAdjustmentsApplied, shop.MetricAdjustmentsDuplicate, shop.MetricAdjustmentsRejected,
	}},
	{"JanitorFunction", janitor.FunctionName, []string{
		janitor.MetricAbandonedLeases, janitor.MetricOrdersRedriven, janitor.MetricSweptRows,
		janitor.MetricSweepSkipped, janitor.MetricRecordsFailed,
	}},
}

// alarmed are the application metrics that must have an alarm on every function emitting them.
var alarmed = []string{janitor.MetricAbandonedLeases, shop.MetricLeaseLost}

// series is one CloudWatch metric: namespace, name and its dimensions as "Name=Value" pairs
// sorted by name and joined by commas.
type series struct {
	Namespace, Metric, Dims string
}

func (s series) String() string { return s.Namespace + "/" + s.Metric + "{" + s.Dims + "}" }

func dimsKey(dims map[string]string) string {
	pairs := make([]string, 0, len(dims))
	for k, v := range dims {
		pairs = append(pairs, k+"="+v)
	}
	sort.Strings(pairs)
	return strings.Join(pairs, ",")
}

// placeholders resolves every Ref and Fn::GetAtt of the template to a distinct text that
// names it ("param-Stage", "ref-JanitorFunction", "attr-OrdersDLQ.QueueName"), so values
// compare equal only when they come from the same parameter, resource or attribute: a
// dashboard that hard-codes "dev" where the functions use !Ref Stage does not pass.
func placeholders(tpl *template.Template) Values {
	v := Values{Refs: map[string]string{}, Attrs: map[string]string{}}
	for name := range tpl.Parameters {
		v.Refs[name] = "param-" + name
	}
	for name := range PseudoParameters {
		v.Refs[name] = "pseudo-" + name
	}
	for id, r := range tpl.Resources {
		v.Refs[id] = "ref-" + id
		for _, a := range attributes[r.Type] {
			v.Attrs[id+"."+a] = "attr-" + id + "." + a
		}
	}
	return v
}

// emfSeries returns the series the functions' EMF output defines, mapped to the function's
// logical id: each function's environment from the template (resolved with vals) is set,
// obs.Metrics builds the function's logger as the handler does, every metric of emitted is
// recorded, and the EMF documents written are parsed as CloudWatch reads them.
func emfSeries(t *testing.T, tpl *template.Template, vals Values) map[series]string {
	t.Helper()
	var ids []string
	for _, f := range functions(t, tpl) {
		ids = append(ids, f.LogicalID)
	}
	var listed []string
	for _, e := range emitted {
		listed = append(listed, e.logicalID)
	}
	sort.Strings(listed)
	if !slices.Equal(ids, listed) {
		t.Fatalf("the template's functions are %v, the emitted table lists %v: add the new function's metrics", ids, listed)
	}
	old := obs.MetricsOutput
	t.Cleanup(func() { obs.MetricsOutput = old })
	out := map[series]string{}
	for _, e := range emitted {
		f, err := LookupFunction(tpl, e.logicalID)
		if err != nil {
			t.Fatal(err)
		}
		if dir := f.SourceDir(); dir != "functions/"+e.function {
			t.Errorf("%s: metrics name the function %q, its code is in %s", e.logicalID, e.function, dir)
		}
		env, err := f.ResolveEnvironment(vals)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{obs.NamespaceEnv, "STAGE", obs.PowertoolsNamespaceEnv, obs.PowertoolsServiceEnv} {
			t.Setenv(k, env[k]) // unset and empty mean the same to obs.Metrics
		}
		var buf bytes.Buffer
		obs.MetricsOutput = &buf
		m := obs.Metrics(context.Background(), e.function)
		for _, name := range e.metrics {
			m.PutMetric(name, 1, emf.Count)
		}
		if err := m.Flush(); err != nil {
			t.Fatalf("%s: EMF flush: %v", e.logicalID, err)
		}
		got, err := parseEMF(buf.Bytes())
		if err != nil {
			t.Fatalf("%s: %v\n%s", e.logicalID, err, buf.String())
		}
		if len(got) != len(e.metrics) {
			t.Fatalf("%s: the EMF output defines %d series, want one per metric (%d): %v", e.logicalID, len(got), len(e.metrics), got)
		}
		for _, s := range got {
			out[s] = e.logicalID
		}
	}
	return out
}

// parseEMF returns the series EMF documents (one JSON object a line) define: every metric of
// every directive under every dimension set, with the dimension values of the document.
func parseEMF(data []byte) ([]series, error) {
	var out []series
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		var doc map[string]any
		if err := json.Unmarshal(sc.Bytes(), &doc); err != nil {
			return nil, fmt.Errorf("EMF line is not JSON: %w", err)
		}
		meta, _ := doc["_aws"].(map[string]any)
		directives, _ := meta["CloudWatchMetrics"].([]any)
		if len(directives) == 0 {
			return nil, fmt.Errorf("EMF document without CloudWatchMetrics: %v", doc)
		}
		for _, d := range directives {
			dm, _ := d.(map[string]any)
			ns, _ := dm["Namespace"].(string)
			sets, _ := dm["Dimensions"].([]any)
			metrics, _ := dm["Metrics"].([]any)
			for _, set := range sets {
				names, _ := set.([]any)
				dims := map[string]string{}
				for _, n := range names {
					name, _ := n.(string)
					val, ok := doc[name].(string)
					if !ok {
						return nil, fmt.Errorf("dimension %s has no string value in %v", name, doc)
					}
					dims[name] = val
				}
				for _, mt := range metrics {
					mm, _ := mt.(map[string]any)
					name, _ := mm["Name"].(string)
					out = append(out, series{ns, name, dimsKey(dims)})
				}
			}
		}
	}
	return out, sc.Err()
}

type alarm struct {
	id    string
	props map[string]any
}

func alarms(t *testing.T, tpl *template.Template) []alarm {
	t.Helper()
	var out []alarm
	for id, r := range tpl.Resources {
		if r.Type == "AWS::CloudWatch::Alarm" {
			out = append(out, alarm{id, r.Properties})
		}
	}
	if len(out) == 0 {
		t.Fatal("the template has no AWS::CloudWatch::Alarm")
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// series returns the one metric the alarm watches, with its intrinsics resolved by vals.
func (a alarm) series(vals Values) (series, error) {
	if a.props["Metrics"] != nil {
		return series{}, fmt.Errorf("%s: metric-math alarm (Metrics): watch one metric (Namespace, MetricName, Dimensions) so it can be checked", a.id)
	}
	ns, err := vals.Resolve(a.props["Namespace"])
	if err != nil {
		return series{}, fmt.Errorf("%s: Namespace: %w", a.id, err)
	}
	name, err := vals.Resolve(a.props["MetricName"])
	if err != nil {
		return series{}, fmt.Errorf("%s: MetricName: %w", a.id, err)
	}
	dims := map[string]string{}
	list, _ := a.props["Dimensions"].([]any)
	for i, d := range list {
		dm, _ := d.(map[string]any)
		dn, _ := dm["Name"].(string)
		dv, err := vals.Resolve(dm["Value"])
		if err != nil || dn == "" {
			return series{}, fmt.Errorf("%s: Dimensions[%d] = %v: %v", a.id, i, d, err)
		}
		if _, dup := dims[dn]; dup {
			return series{}, fmt.Errorf("%s: dimension %s given twice", a.id, dn)
		}
		dims[dn] = dv
	}
	return series{ns, name, dimsKey(dims)}, nil
}

func (a alarm) statistic() string { s, _ := a.props["Statistic"].(string); return s }

// firesAboveZero reports whether the alarm goes off on any value above zero.
func (a alarm) firesAboveZero() bool {
	var th float64
	switch v := a.props["Threshold"].(type) {
	case int:
		th = float64(v)
	case float64:
		th = v
	default:
		return false
	}
	switch a.props["ComparisonOperator"] {
	case "GreaterThanThreshold":
		return th == 0
	case "GreaterThanOrEqualToThreshold":
		return th == 1
	}
	return false
}

// appNamespace: a namespace that is not AWS's is the application's EMF output.
func appNamespace(ns string) bool { return !strings.HasPrefix(ns, "AWS/") }

// TestAlarmsWatchEmittedMetrics: an alarm on the application's namespace watches a series
// the functions' EMF output really defines (same namespace, metric name, dimension names
// and values), and every function emitting AbandonedLeases or LeaseLost has an alarm on it
// that fires on any occurrence.
func TestAlarmsWatchEmittedMetrics(t *testing.T) {
	tpl, _ := load(t)
	vals := placeholders(tpl)
	emitting := emfSeries(t, tpl, vals)
	watched := map[series]alarm{}
	for _, a := range alarms(t, tpl) {
		s, err := a.series(vals)
		if err != nil {
			t.Error(err)
			continue
		}
		watched[s] = a
		if !appNamespace(s.Namespace) {
			continue
		}
		if _, ok := emitting[s]; !ok {
			var known []string
			for e := range emitting {
				if e.Metric == s.Metric {
					known = append(known, e.String())
				}
			}
			sort.Strings(known)
			t.Errorf("%s watches %s, which no function emits (EMF series of that name: %v)", a.id, s, known)
		}
	}
	for s, fn := range emitting {
		if !slices.Contains(alarmed, s.Metric) {
			continue
		}
		a, ok := watched[s]
		switch {
		case !ok:
			t.Errorf("%s emits %s: no alarm watches it", fn, s)
		case a.statistic() != "Sum" || !a.firesAboveZero():
			t.Errorf("%s: Statistic %s, %v %v: want Sum > 0", a.id, a.statistic(), a.props["ComparisonOperator"], a.props["Threshold"])
		case a.props["TreatMissingData"] != "notBreaching":
			t.Errorf("%s: TreatMissingData %v: the metric exists only when something happened, so no data is OK (notBreaching)", a.id, a.props["TreatMissingData"])
		}
	}
}

// deadLetterQueues returns the queues the template uses as dead-letter queues or failure
// destinations: queue RedrivePolicy targets, rule DeadLetterConfigs, event source and
// asynchronous-invocation OnFailure destinations, function DeadLetterQueues.
func deadLetterQueues(t *testing.T, tpl *template.Template) []string {
	t.Helper()
	set := map[string]bool{}
	add := func(v any, path string) {
		refs, err := References(v, path)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range refs {
			if tpl.Resources[r.Target].Type == "AWS::SQS::Queue" {
				set[r.Target] = true
			}
		}
	}
	for id, r := range tpl.Resources {
		if r.Type == "AWS::SQS::Queue" {
			rp, _ := r.Properties["RedrivePolicy"].(map[string]any)
			add(rp["deadLetterTargetArn"], id+"/RedrivePolicy")
		}
	}
	for _, f := range functions(t, tpl) {
		for _, e := range f.Events() {
			add(e.Properties["DeadLetterConfig"], f.LogicalID+"/"+e.Name+"/DeadLetterConfig")
			add(e.Properties["DestinationConfig"], f.LogicalID+"/"+e.Name+"/DestinationConfig")
		}
		add(f.lookup("EventInvokeConfig/DestinationConfig"), f.LogicalID+"/EventInvokeConfig")
		add(f.Properties["DeadLetterQueue"], f.LogicalID+"/DeadLetterQueue")
	}
	out := make([]string, 0, len(set))
	for id := range set {
		out = append(out, id)
	}
	sort.Strings(out)
	if len(out) == 0 {
		t.Fatal("no dead-letter queues found: the walker is broken")
	}
	return out
}

func dlqDepth(vals Values, queue string) series {
	return series{"AWS/SQS", "ApproximateNumberOfMessagesVisible", dimsKey(map[string]string{"QueueName": vals.Attrs[queue+".QueueName"]})}
}

func lambdaMetric(vals Values, fn, metric string) series {
	return series{"AWS/Lambda", metric, dimsKey(map[string]string{"FunctionName": vals.Refs[fn]})}
}

// TestEveryDeadLetterQueueHasADepthAlarm: a message in any DLQ raises an alarm, which stays
// raised while the messages stay (SQS stops the metrics of a queue idle for six hours: no
// data must not turn it OK).
func TestEveryDeadLetterQueueHasADepthAlarm(t *testing.T) {
	tpl, _ := load(t)
	vals := placeholders(tpl)
	as := alarms(t, tpl)
	for _, q := range deadLetterQueues(t, tpl) {
		want := dlqDepth(vals, q)
		found := false
		for _, a := range as {
			if s, err := a.series(vals); err != nil || s != want {
				continue
			}
			found = true
			if a.statistic() != "Maximum" || !a.firesAboveZero() {
				t.Errorf("%s: Statistic %s, %v %v: want Maximum > 0", a.id, a.statistic(), a.props["ComparisonOperator"], a.props["Threshold"])
			}
			if tmd := a.props["TreatMissingData"]; tmd == "notBreaching" || tmd == nil || tmd == "missing" {
				t.Errorf("%s: TreatMissingData %v: a DLQ gone quiet with its messages must stay in ALARM (ignore)", a.id, tmd)
			}
		}
		if !found {
			t.Errorf("dead-letter queue %s has no alarm on %s", q, want)
		}
	}
}

// TestEveryFunctionHasErrorAndThrottleAlarms: Errors and Throttles of every function, and
// the iterator age of every stream it reads, raise alarms.
func TestEveryFunctionHasErrorAndThrottleAlarms(t *testing.T) {
	tpl, _ := load(t)
	vals := placeholders(tpl)
	byseries := map[series]alarm{}
	for _, a := range alarms(t, tpl) {
		if s, err := a.series(vals); err == nil {
			byseries[s] = a
		}
	}
	for _, f := range functions(t, tpl) {
		t.Run(f.LogicalID, func(t *testing.T) {
			for _, m := range []string{"Errors", "Throttles"} {
				a, ok := byseries[lambdaMetric(vals, f.LogicalID, m)]
				if !ok {
					t.Errorf("no alarm on AWS/Lambda %s with FunctionName !Ref %s", m, f.LogicalID)
				} else if a.statistic() != "Sum" || !a.firesAboveZero() || a.props["TreatMissingData"] != "notBreaching" {
					t.Errorf("%s: want Sum > 0, missing data not breaching; got %s %v %v %v", a.id, a.statistic(),
						a.props["ComparisonOperator"], a.props["Threshold"], a.props["TreatMissingData"])
				}
			}
			for _, e := range f.Events() {
				if e.Type != "DynamoDB" && e.Type != "Kinesis" {
					continue
				}
				a, ok := byseries[lambdaMetric(vals, f.LogicalID, "IteratorAge")]
				if !ok {
					t.Errorf("%s reads a stream: no alarm on AWS/Lambda IteratorAge with FunctionName !Ref %s", e.Name, f.LogicalID)
				} else if a.statistic() != "Maximum" || a.props["ComparisonOperator"] != "GreaterThanThreshold" {
					t.Errorf("%s: want Maximum > threshold, got %s %v", a.id, a.statistic(), a.props["ComparisonOperator"])
				}
			}
		})
	}
}

// TestAlarmsNotifyTheOptionalTopic: every alarm notifies AlarmTopicArn on ALARM and OK when
// the parameter is given, and nobody when it is empty (the default).
func TestAlarmsNotifyTheOptionalTopic(t *testing.T) {
	tpl, _ := load(t)
	p, _ := tpl.Parameters["AlarmTopicArn"].(map[string]any)
	if p == nil || p["Default"] != "" || p["Type"] != "String" {
		t.Fatalf("parameter AlarmTopicArn = %v, want a String defaulting to \"\"", p)
	}
	decode := func(s string) any {
		v, err := template.Decode([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if cond := tpl.Conditions["HasAlarmTopic"]; !reflect.DeepEqual(cond, decode(`!Not [!Equals [!Ref AlarmTopicArn, ""]]`)) {
		t.Errorf("condition HasAlarmTopic = %v, want AlarmTopicArn not empty", cond)
	}
	want := decode(`!If [HasAlarmTopic, [!Ref AlarmTopicArn], !Ref AWS::NoValue]`)
	for _, a := range alarms(t, tpl) {
		for _, k := range []string{"AlarmActions", "OKActions"} {
			if !reflect.DeepEqual(a.props[k], want) {
				t.Errorf("%s: %s = %v, want %v", a.id, k, a.props[k], want)
			}
		}
		if a.props["ActionsEnabled"] == false {
			t.Errorf("%s: ActionsEnabled false", a.id)
		}
	}
}

// dashboardMetric is one entry of a metric widget's "metrics" list.
type dashboardMetric struct {
	series
	stat string
}

// parseMetricEntry reads ["Namespace", "Metric", "DimName", "DimValue", ..., {options}].
// Shorthand ("." and "...") and expressions are refused: every entry names its metric.
func parseMetricEntry(entry any, defaultStat string) (dashboardMetric, error) {
	list, ok := entry.([]any)
	if !ok {
		return dashboardMetric{}, fmt.Errorf("metric entry %v is not a list", entry)
	}
	var opts map[string]any
	if n := len(list); n > 0 {
		if m, ok := list[n-1].(map[string]any); ok {
			opts, list = m, list[:n-1]
		}
	}
	strs := make([]string, 0, len(list))
	for _, x := range list {
		s, ok := x.(string)
		if !ok || s == "." || s == "..." {
			return dashboardMetric{}, fmt.Errorf("metric entry %v: write namespace, name and every dimension in full", entry)
		}
		strs = append(strs, s)
	}
	if _, ok := opts["expression"]; ok || len(strs) < 2 || len(strs)%2 != 0 {
		return dashboardMetric{}, fmt.Errorf("metric entry %v: want namespace, name and dimension name/value pairs", entry)
	}
	dims := map[string]string{}
	for i := 2; i < len(strs); i += 2 {
		dims[strs[i]] = strs[i+1]
	}
	stat := defaultStat
	if s, ok := opts["stat"].(string); ok {
		stat = s
	}
	return dashboardMetric{series{strs[0], strs[1], dimsKey(dims)}, stat}, nil
}

// TestDashboard: the dashboard body is JSON once its ${} variables are substituted, shows
// only metrics that exist — the functions' EMF series, the template's DLQs and functions —
// in the stack's region, shows what an operator needs (lock wait p50/p99, contention,
// abandoned leases, orders reserved and rejected, every DLQ's depth), and lists every alarm.
func TestDashboard(t *testing.T) {
	tpl, _ := load(t)
	vals := placeholders(tpl)
	emitting := emfSeries(t, tpl, vals)
	dlqs := map[series]string{}
	for _, q := range deadLetterQueues(t, tpl) {
		dlqs[dlqDepth(vals, q)] = q
	}
	fnNames := map[string]bool{}
	for _, f := range functions(t, tpl) {
		fnNames[vals.Refs[f.LogicalID]] = true
	}
	wantAlarms := map[string]bool{}
	for _, a := range alarms(t, tpl) {
		wantAlarms[vals.Attrs[a.id+".Arn"]] = true
	}

	n := 0
	for id, r := range tpl.Resources {
		if r.Type != "AWS::CloudWatch::Dashboard" {
			continue
		}
		n++
		t.Run(id, func(t *testing.T) {
			text, err := vals.Resolve(r.Properties["DashboardBody"])
			if err != nil {
				t.Fatalf("DashboardBody: %v", err)
			}
			var body struct {
				Widgets []struct {
					Type       string         `json:"type"`
					Properties map[string]any `json:"properties"`
				} `json:"widgets"`
			}
			if err := json.Unmarshal([]byte(text), &body); err != nil {
				t.Fatalf("DashboardBody is not JSON after substitution: %v\n%s", err, text)
			}
			if len(body.Widgets) == 0 {
				t.Fatal("no widgets")
			}
			shown := map[dashboardMetric]bool{}
			listed := map[string]bool{}
			for i, w := range body.Widgets {
				switch w.Type {
				case "metric":
					if reg := w.Properties["region"]; reg != vals.Refs["AWS::Region"] {
						t.Errorf("widget %d: region %v, want ${AWS::Region}", i, reg)
					}
					stat, _ := w.Properties["stat"].(string)
					entries, _ := w.Properties["metrics"].([]any)
					if len(entries) == 0 {
						t.Errorf("widget %d: no metrics", i)
					}
					for _, e := range entries {
						m, err := parseMetricEntry(e, stat)
						if err != nil {
							t.Errorf("widget %d: %v", i, err)
							continue
						}
						if m.stat == "" {
							t.Errorf("widget %d: %s has no stat", i, m.series)
						}
						shown[m] = true
						switch {
						case appNamespace(m.Namespace):
							if _, ok := emitting[m.series]; !ok {
								t.Errorf("widget %d: %s: no function emits it", i, m.series)
							}
						case m.Namespace == "AWS/SQS":
							if _, ok := dlqs[m.series]; !ok {
								t.Errorf("widget %d: %s is not the depth of one of the template's DLQs", i, m.series)
							}
						case m.Namespace == "AWS/Lambda":
							fn := strings.TrimPrefix(m.Dims, "FunctionName=")
							if !fnNames[fn] || !slices.Contains([]string{"Errors", "Throttles", "IteratorAge", "Invocations", "Duration", "ConcurrentExecutions"}, m.Metric) {
								t.Errorf("widget %d: %s: want a Lambda metric of one of the template's functions", i, m.series)
							}
						default:
							t.Errorf("widget %d: %s: namespace not checked by this test", i, m.series)
						}
					}
				case "alarm":
					arns, _ := w.Properties["alarms"].([]any)
					for _, a := range arns {
						s, _ := a.(string)
						if !wantAlarms[s] {
							t.Errorf("widget %d: alarm %v is not one of the template's alarms", i, a)
						}
						listed[s] = true
					}
				case "text":
				default:
					t.Errorf("widget %d: type %q not checked by this test", i, w.Type)
				}
			}
			for arn := range wantAlarms {
				if !listed[arn] {
					t.Errorf("no alarm widget lists %s", strings.TrimSuffix(strings.TrimPrefix(arn, "attr-"), ".Arn"))
				}
			}

			// What the operator needs, for every function emitting it.
			need := map[string][]string{
				shop.MetricLockWait:           {"p50", "p99"},
				shop.MetricContention:         {"Sum"},
				janitor.MetricAbandonedLeases: {"Sum"},
				shop.MetricOrdersReserved:     {"Sum"},
				shop.MetricOrdersRejected:     {"Sum"},
			}
			for s := range emitting {
				for _, stat := range need[s.Metric] {
					if !shown[dashboardMetric{s, stat}] {
						t.Errorf("the dashboard does not show %s %s", s, stat)
					}
				}
			}
			for s, q := range dlqs {
				if !shown[dashboardMetric{s, "Maximum"}] {
					t.Errorf("the dashboard does not show the depth of %s (%s Maximum)", q, s)
				}
			}
		})
	}
	if n == 0 {
		t.Fatal("the template has no AWS::CloudWatch::Dashboard")
	}
}
