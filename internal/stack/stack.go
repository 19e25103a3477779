// Package stack interprets template.yaml as the deployed application sees it: the functions
// with SAM's Globals applied, their event sources and filters, intrinsic references and IAM
// statements. The local tools (cmd/invoke, the stream poller) read functions from here, and
// the package's tests hold the template to the project's rules: every reference resolves,
// every function builds through the root Makefile on arm64/provided.al2023 with active
// tracing, no IAM wildcard in our statements, the janitor's stream filter passes exactly
// the TTL deletions, and the alarms and the dashboard watch metrics the code really emits.
package stack

import (
	"fmt"
	"maps"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/turnstile-locks/turnstile/internal/template"
)

// FunctionType is the SAM resource type of a function.
const FunctionType = "AWS::Serverless::Function"

// Function is an AWS::Serverless::Function with the template's Globals.Function merged in.
type Function struct {
	LogicalID string
	// Properties are the effective properties: the function's own over Globals.Function;
	// maps such as Environment.Variables are merged key by key and lists (Architectures,
	// Layers, ...) are the Globals entries followed by the function's, as SAM does.
	Properties map[string]any
	// Metadata is the resource's Metadata section (BuildMethod, ...).
	Metadata map[string]any
}

// Functions returns every function of the template, sorted by logical id.
func Functions(t *template.Template) ([]Function, error) {
	var ids []string
	for id, r := range t.Resources {
		if r.Type == FunctionType {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	out := make([]Function, 0, len(ids))
	for _, id := range ids {
		f, err := LookupFunction(t, id)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

// LookupFunction returns the function logicalID with Globals applied.
func LookupFunction(t *template.Template, logicalID string) (Function, error) {
	r, ok := t.Resources[logicalID]
	if !ok {
		return Function{}, fmt.Errorf("function %s: no such resource in the template", logicalID)
	}
	if r.Type != FunctionType {
		return Function{}, fmt.Errorf("function %s: resource type is %s, want %s", logicalID, r.Type, FunctionType)
	}
	var globals map[string]any
	if g, ok := t.Globals["Function"].(map[string]any); ok {
		globals = g
	}
	f := Function{LogicalID: logicalID, Properties: mergeGlobals(globals, r.Properties)}
	if md, ok := r.Raw["Metadata"].(map[string]any); ok {
		f.Metadata = md
	}
	return f, nil
}

// mergeGlobals applies SAM's Globals rules (samtranslator's Globals._do_merge): a scalar or
// intrinsic set on the resource wins; maps are merged recursively; lists are additive, the
// Globals entries first ("Lists Are Additive": Globals [a] and resource [b] give [a, b]).
// Values of different kinds: the resource's wins.
func mergeGlobals(globals, props map[string]any) map[string]any {
	out := make(map[string]any, len(globals)+len(props))
	maps.Copy(out, globals)
	for k, v := range props {
		gm, gok := out[k].(map[string]any)
		pm, pok := v.(map[string]any)
		if gok && pok && !isIntrinsic(gm) && !isIntrinsic(pm) {
			out[k] = mergeGlobals(gm, pm)
			continue
		}
		gl, glok := out[k].([]any)
		pl, plok := v.([]any)
		if glok && plok {
			out[k] = append(append([]any{}, gl...), pl...)
			continue
		}
		out[k] = v
	}
	return out
}

// String returns the string property at a slash-separated path ("Runtime",
// "LoggingConfig/LogFormat"); "" when absent or not a string.
func (f Function) String(p string) string {
	s, _ := f.lookup(p).(string)
	return s
}

// Int returns the integer property at path p (YAML ints and numeric strings), or def.
func (f Function) Int(p string, def int) int {
	switch v := f.lookup(p).(type) {
	case int:
		return v
	case float64:
		return int(v)
	case string:
		if n, err := strconv.Atoi(v); err == nil {
			return n
		}
	}
	return def
}

// lookup walks a slash-separated path through nested maps.
func (f Function) lookup(p string) any {
	var cur any = f.Properties
	for _, k := range strings.Split(p, "/") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[k]
	}
	return cur
}

// Timeout is the function timeout in seconds (SAM's default is 3).
func (f Function) Timeout() int { return f.Int("Timeout", 3) }

// MemorySize is the memory in MB (SAM's default is 128).
func (f Function) MemorySize() int { return f.Int("MemorySize", 128) }

// Architectures returns the function's architectures (default x86_64).
func (f Function) Architectures() []string {
	l, ok := f.Properties["Architectures"].([]any)
	if !ok {
		return []string{"x86_64"}
	}
	out := make([]string, 0, len(l))
	for _, a := range l {
		s, _ := a.(string)
		out = append(out, s)
	}
	return out
}

// Environment returns the function's environment variables as written (values may be
// intrinsics; see Values.Resolve).
func (f Function) Environment() map[string]any {
	if vars, ok := f.lookup("Environment/Variables").(map[string]any); ok {
		return vars
	}
	return map[string]any{}
}

// Events returns the function's event sources by name.
func (f Function) Events() map[string]Event {
	out := map[string]Event{}
	evs, _ := f.Properties["Events"].(map[string]any)
	for name, e := range evs {
		m, _ := e.(map[string]any)
		typ, _ := m["Type"].(string)
		props, _ := m["Properties"].(map[string]any)
		out[name] = Event{Name: name, Type: typ, Properties: props}
	}
	return out
}

// Event is one entry of a function's Events.
type Event struct {
	Name       string
	Type       string // SQS, DynamoDB, EventBridgeRule, Schedule, ...
	Properties map[string]any
}

// FilterPatterns returns the patterns of the event's FilterCriteria (event source mappings)
// as JSON strings, or its Pattern (EventBridge rules) re-encoded as one.
func (e Event) FilterPatterns() []any {
	if p, ok := e.Properties["Pattern"]; ok {
		return []any{p}
	}
	fc, _ := e.Properties["FilterCriteria"].(map[string]any)
	filters, _ := fc["Filters"].([]any)
	out := make([]any, 0, len(filters))
	for _, f := range filters {
		if m, ok := f.(map[string]any); ok {
			out = append(out, m["Pattern"])
		}
	}
	return out
}

// SourceDir returns the main package of the function relative to the module root:
// functions/<name>, where name is the logical id without its "Function" suffix, in lower
// case (OrderProcessorFunction -> functions/orderprocessor). The root Makefile's
// build-<LogicalId> targets build these directories.
func (f Function) SourceDir() string {
	return SourceDir(f.LogicalID)
}

// SourceDir is Function.SourceDir for a logical id.
func SourceDir(logicalID string) string {
	return path.Join("functions", strings.ToLower(strings.TrimSuffix(logicalID, "Function")))
}
