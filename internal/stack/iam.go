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
// policies (QueuePolicy, ...) name their principal and may omit nothing else. The one
// exception: Resource "*" on a statement whose actions all lack resource-level permissions
// (NoResourceLevelActions). Principal "*" is not reported: our resource policies use it
// only in Deny statements, which restrict (TestResourcePoliciesOnlyDeny holds them to it).
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
		if onlyNoResourceLevel(s) {
			continue // documented: see NoResourceLevelActions
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

// NoResourceLevelActions are the actions our statements may grant on Resource "*": they
// have no resource-level permissions, so "*" is the only resource IAM accepts for them.
// Wildcards reports a "*" Resource unless every action of the statement is listed here
// (docs/security.md documents each).
var NoResourceLevelActions = map[string]string{
	"xray:PutTraceSegments":    "X-Ray active tracing: the Lambda runtime sends segments; no resource-level permissions",
	"xray:PutTelemetryRecords": "X-Ray active tracing: the Lambda runtime sends telemetry; no resource-level permissions",
}

// onlyNoResourceLevel reports whether every action of s is in NoResourceLevelActions and
// its only resource is the literal "*".
func onlyNoResourceLevel(s Statement) bool {
	if len(s.Actions) == 0 || len(s.Resources) != 1 || s.Resources[0] != "*" {
		return false
	}
	for _, a := range s.Actions {
		str, _ := a.(string)
		if _, ok := NoResourceLevelActions[str]; !ok {
			return false
		}
	}
	return true
}

// Grant is one action an Allow statement grants on one resource.
type Grant struct {
	Action    string // e.g. dynamodb:GetItem
	Target    string // logical id of the resource, or "*"
	Attribute string // the Fn::GetAtt attribute (Arn, StreamArn); "" for Ref and "*"
	Path      string // the statement
}

// String is "action on Target[.Attribute]".
func (g Grant) String() string {
	t := g.Target
	if g.Attribute != "" {
		t += "." + g.Attribute
	}
	return g.Action + " on " + t
}

// RoleOf returns the logical id of the AWS::IAM::Role the function runs under (its Role
// property, !GetAtt <Role>.Arn), or "" when SAM generates the role.
func RoleOf(t *template.Template, f Function) (string, error) {
	r, ok := f.Properties["Role"]
	if !ok || r == nil {
		return "", nil
	}
	refs, err := References(r, "Resources/"+f.LogicalID+"/Properties/Role")
	if err != nil {
		return "", err
	}
	if len(refs) != 1 || refs[0].Kind != "Fn::GetAtt" || refs[0].Attribute != "Arn" {
		return "", fmt.Errorf("%s: Role must be !GetAtt <Role>.Arn of a role in the template, got %v", f.LogicalID, r)
	}
	id := refs[0].Target
	if res, ok := t.Resources[id]; !ok || res.Type != "AWS::IAM::Role" {
		return "", fmt.Errorf("%s: Role names %s, which is not an AWS::IAM::Role of the template", f.LogicalID, id)
	}
	return id, nil
}

// FunctionStatements returns the statements that apply to the function's execution role:
// its own Policies (SAM-generated role), or the inline policies of its explicit role and
// the AWS::IAM::Policy / ManagedPolicy resources attached to that role.
func FunctionStatements(t *template.Template, f Function) ([]Statement, error) {
	role, err := RoleOf(t, f)
	if err != nil {
		return nil, err
	}
	stmts, _ := PolicyStatements(t)
	var out []Statement
	for _, s := range stmts {
		switch {
		case s.Owner == f.LogicalID:
			out = append(out, s)
		case role != "" && s.Owner == role:
			out = append(out, s)
		case role != "":
			res := t.Resources[s.Owner]
			if res.Type != "AWS::IAM::Policy" && res.Type != "AWS::IAM::ManagedPolicy" {
				continue
			}
			refs, err := References(res.Properties["Roles"], "Roles")
			if err != nil {
				return nil, err
			}
			for _, r := range refs {
				if r.Target == role {
					out = append(out, s)
					break
				}
			}
		}
	}
	return out, nil
}

// FunctionGrants returns every (action, resource) pair the Allow statements of the
// function's execution role grant. A Resource must be "*", a Ref or a Fn::GetAtt of a
// template resource: anything else is an error, since it cannot be compared.
func FunctionGrants(t *template.Template, f Function) ([]Grant, error) {
	stmts, err := FunctionStatements(t, f)
	if err != nil {
		return nil, err
	}
	var out []Grant
	for _, s := range stmts {
		if s.Effect != "Allow" {
			continue
		}
		for i, r := range s.Resources {
			g := Grant{Path: s.Path}
			if r == "*" {
				g.Target = "*"
			} else {
				refs, err := References(r, fmt.Sprintf("%s/Resource[%d]", s.Path, i))
				if err != nil {
					return nil, err
				}
				m, _ := r.(map[string]any)
				if len(refs) != 1 || len(m) != 1 || (refs[0].Kind != "Ref" && refs[0].Kind != "Fn::GetAtt") {
					return nil, fmt.Errorf("%s: Resource %v is neither \"*\" nor one Ref or Fn::GetAtt", s.Path, r)
				}
				g.Target, g.Attribute = refs[0].Target, refs[0].Attribute
			}
			for _, a := range s.Actions {
				str, ok := a.(string)
				if !ok {
					return nil, fmt.Errorf("%s: Action %v is not a literal string", s.Path, a)
				}
				g.Action = str
				out = append(out, g)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out, nil
}
