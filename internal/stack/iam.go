package stack

import (
	"fmt"
	"sort"
	"strings"

	"github.com/turnstile-locks/turnstile/internal/template"
)

// Statement is one IAM policy statement written in the template.
type Statement struct {
	Path      string // where it is, e.g. Resources/JanitorFunction/Properties/Policies[0]/Statement[2]
	Owner     string // logical id of the resource holding the policy
	Effect    string
	Actions   []any // Action values as written
	Resources []any // Resource values as written (strings or intrinsics)
	Raw       map[string]any
}

// PolicyStatements returns the IAM statements the template itself writes: inline policies
// of functions (Policies), IAM roles and policies, and resource policies (SQS queue, SNS
// topic, EventBridge bus). It also returns a problem for every policy the template
// delegates (managed policy names or ARNs, SAM policy templates), whose statements are not
// in the template and cannot be checked here.
func PolicyStatements(t *template.Template) ([]Statement, []string) {
	var stmts []Statement
	var delegated []string
	ids := make([]string, 0, len(t.Resources))
	for id := range t.Resources {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		r := t.Resources[id]
		base := "Resources/" + id + "/Properties"
		switch r.Type {
		case FunctionType:
			pols := r.Properties["Policies"]
			list, ok := pols.([]any)
			if !ok && pols != nil {
				list = []any{pols}
			}
			for i, p := range list {
				path := fmt.Sprintf("%s/Policies[%d]", base, i)
				switch x := p.(type) {
				case string:
					delegated = append(delegated, fmt.Sprintf("%s: managed policy %q", path, x))
				case map[string]any:
					if _, ok := x["Statement"]; ok {
						stmts = append(stmts, statements(id, path, x)...)
						continue
					}
					for name := range x {
						delegated = append(delegated, fmt.Sprintf("%s: SAM policy template %s", path, name))
					}
				}
			}
		case "AWS::IAM::Role":
			if pols, ok := r.Properties["Policies"].([]any); ok {
				for i, p := range pols {
					m, _ := p.(map[string]any)
					doc, _ := m["PolicyDocument"].(map[string]any)
					stmts = append(stmts, statements(id, fmt.Sprintf("%s/Policies[%d]/PolicyDocument", base, i), doc)...)
				}
			}
			if arns, ok := r.Properties["ManagedPolicyArns"].([]any); ok {
				for i, a := range arns {
					delegated = append(delegated, fmt.Sprintf("%s/ManagedPolicyArns[%d]: managed policy %v", base, i, a))
				}
			}
		case "AWS::IAM::Policy", "AWS::IAM::ManagedPolicy", "AWS::SQS::QueuePolicy", "AWS::SNS::TopicPolicy":
			doc, _ := r.Properties["PolicyDocument"].(map[string]any)
			stmts = append(stmts, statements(id, base+"/PolicyDocument", doc)...)
		case "AWS::Events::EventBusPolicy":
			if st, ok := r.Properties["Statement"].(map[string]any); ok {
				stmts = append(stmts, statement(id, base+"/Statement", st))
			}
		}
	}
	return stmts, delegated
}

func statements(owner, path string, doc map[string]any) []Statement {
	var out []Statement
	switch s := doc["Statement"].(type) {
	case []any:
		for i, x := range s {
			if m, ok := x.(map[string]any); ok {
				out = append(out, statement(owner, fmt.Sprintf("%s/Statement[%d]", path, i), m))
			}
		}
	case map[string]any:
		out = append(out, statement(owner, path+"/Statement", s))
	}
	return out
}

func statement(owner, path string, m map[string]any) Statement {
	st := Statement{Path: path, Owner: owner, Raw: m}
	st.Effect, _ = m["Effect"].(string)
	st.Actions = asList(m["Action"])
	st.Resources = asList(m["Resource"])
	return st
}

func asList(v any) []any {
	switch x := v.(type) {
	case nil:
		return nil
	case []any:
		return x
	default:
		return []any{x}
	}
}

// Wildcards returns a problem for every "*" in an Action or Resource of the statements
// (including inside Fn::Sub and Fn::Join text), every NotAction/NotResource (which grant
// everything else), and every Allow statement without an Action or Resource. Resource
// policies (QueuePolicy, ...) name their principal and may omit nothing else.
func Wildcards(stmts []Statement) []string {
	var problems []string
	for _, s := range stmts {
		for _, k := range []string{"NotAction", "NotResource"} {
			if _, ok := s.Raw[k]; ok {
				problems = append(problems, fmt.Sprintf("%s: %s grants everything not listed", s.Path, k))
			}
		}
		if s.Effect == "Allow" && (len(s.Actions) == 0 || len(s.Resources) == 0) {
			problems = append(problems, fmt.Sprintf("%s: Allow statement without Action or Resource", s.Path))
		}
		for _, a := range s.Actions {
			str, ok := a.(string)
			if !ok {
				problems = append(problems, fmt.Sprintf("%s: Action %v is not a literal string", s.Path, a))
				continue
			}
			if strings.Contains(str, "*") {
				problems = append(problems, fmt.Sprintf("%s: Action %q has a wildcard", s.Path, str))
			}
		}
		for _, r := range s.Resources {
			for _, lit := range literals(r) {
				if strings.Contains(lit, "*") {
					problems = append(problems, fmt.Sprintf("%s: Resource %v has a wildcard", s.Path, r))
					break
				}
			}
		}
	}
	return problems
}

// literals returns the literal text in a value: plain strings, Fn::Sub templates, and the
// strings of Fn::Join and other intrinsic arguments (Ref and GetAtt name entities, not text).
func literals(v any) []string {
	switch x := v.(type) {
	case string:
		return []string{x}
	case []any:
		var out []string
		for _, e := range x {
			out = append(out, literals(e)...)
		}
		return out
	case map[string]any:
		if _, ok := x["Ref"]; ok && len(x) == 1 {
			return nil
		}
		if _, ok := x["Fn::GetAtt"]; ok && len(x) == 1 {
			return nil
		}
		var out []string
		for _, e := range x {
			out = append(out, literals(e)...)
		}
		return out
	}
	return nil
}

// ResourceTargets returns the logical ids a statement's Resource entries refer to.
func (s Statement) ResourceTargets() ([]string, error) {
	var ids []string
	for i, r := range s.Resources {
		refs, err := References(r, fmt.Sprintf("%s/Resource[%d]", s.Path, i))
		if err != nil {
			return nil, err
		}
		for _, ref := range refs {
			if !PseudoParameters[ref.Target] {
				ids = append(ids, ref.Target)
			}
		}
	}
	return ids, nil
}
