package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/turnstile-locks/turnstile/internal/eventshape"
	"github.com/turnstile-locks/turnstile/internal/stack"
	"github.com/turnstile-locks/turnstile/internal/template"
)

// checkEvent refuses an event its function's triggers (template.yaml Events) never deliver:
// an EventBridge event to the SQS-triggered order processor, SQS records to the janitor, an
// EventBridge event the rule's pattern does not match, ... force skips the check (to see how
// the function handles a foreign event).
func checkEvent(fn stack.Function, event []byte) error {
	shape := eventshape.Classify(event)
	evs := fn.Events()
	names := make([]string, 0, len(evs))
	for n := range evs {
		names = append(names, n)
	}
	sort.Strings(names)
	var wants []string
	for _, n := range names {
		e := evs[n]
		kinds := eventshape.TriggerKinds(e.Type)
		wants = append(wants, fmt.Sprintf("%s (%s)", n, e.Type))
		if kinds == nil {
			return nil // a trigger this check does not know: let the function decide
		}
		for _, k := range kinds {
			if k != shape.Kind {
				continue
			}
			if shape.IsEventBridge() && e.Type == "EventBridgeRule" {
				if ok, err := ruleMatches(e, event); err == nil && !ok {
					continue
				}
			}
			return nil
		}
	}
	if len(wants) == 0 {
		return nil // no triggers: invoked directly, any payload
	}
	return fmt.Errorf("%s is triggered by %s; the event is %s, which none of them delivers (check EVENT, or FORCE=1 / -force to invoke anyway)",
		fn.LogicalID, strings.Join(wants, ", "), shape)
}

// ruleMatches applies an EventBridge rule's Pattern to the event.
func ruleMatches(e stack.Event, event []byte) (bool, error) {
	pats := e.FilterPatterns()
	if len(pats) == 0 {
		return true, nil
	}
	var ev any
	if err := json.Unmarshal(event, &ev); err != nil {
		return false, err
	}
	return stack.MatchAny(pats, ev)
}

// suggestFunction returns "; did you mean X?" for a logical id close to name, or "".
func suggestFunction(tpl *template.Template, name string) string {
	fns, err := stack.Functions(tpl)
	if err != nil || len(fns) == 0 {
		return ""
	}
	best, bestD := "", -1
	norm := func(s string) string { return strings.ToLower(strings.TrimSuffix(s, "Function")) }
	var all []string
	for _, f := range fns {
		all = append(all, f.LogicalID)
		d := levenshtein(norm(name), norm(f.LogicalID))
		if strings.Contains(norm(f.LogicalID), norm(name)) && norm(name) != "" {
			d = min(d, 1)
		}
		if bestD < 0 || d < bestD {
			best, bestD = f.LogicalID, d
		}
	}
	if bestD >= 0 && bestD <= max(2, len(norm(name))/3) {
		return fmt.Sprintf("; did you mean %s? (functions: %s)", best, strings.Join(all, ", "))
	}
	return fmt.Sprintf(" (functions: %s)", strings.Join(all, ", "))
}

func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// envVarsFile is the --env-vars file of sam local invoke: per function logical id a map of
// variables, and "Parameters" for every function.
type envVarsFile map[string]map[string]any

// loadEnvVars reads an env-vars file and returns the overrides for function fn: the
// "Parameters" section, then fn's own section over it. As with sam local invoke, only
// variables the template declares for the function are overridden; the others are reported
// in ignored.
func loadEnvVars(path, fn string, declared map[string]string) (set map[string]string, ignored []string, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the env-vars file: %w", err)
	}
	var f envVarsFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, nil, fmt.Errorf("env-vars file %s: want {\"FunctionLogicalId\": {\"VAR\": \"value\"}, \"Parameters\": {...}}: %w", path, err)
	}
	set = map[string]string{}
	for _, section := range []string{"Parameters", fn} {
		keys := make([]string, 0, len(f[section]))
		for k := range f[section] {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			v, err := envString(f[section][k])
			if err != nil {
				return nil, nil, fmt.Errorf("env-vars file %s: %s.%s: %w", path, section, k, err)
			}
			if _, ok := declared[k]; !ok {
				ignored = append(ignored, section+"."+k)
				continue
			}
			set[k] = v
		}
	}
	return set, ignored, nil
}

func envString(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case float64, bool:
		return fmt.Sprint(x), nil
	case nil:
		return "", nil
	}
	return "", fmt.Errorf("must be a string, number or boolean")
}
