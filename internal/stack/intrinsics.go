package stack

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/turnstile-locks/turnstile/internal/template"
)

// PseudoParameters are the names CloudFormation defines for every stack.
var PseudoParameters = map[string]bool{
	"AWS::AccountId":        true,
	"AWS::NotificationARNs": true,
	"AWS::NoValue":          true,
	"AWS::Partition":        true,
	"AWS::Region":           true,
	"AWS::StackId":          true,
	"AWS::StackName":        true,
	"AWS::URLSuffix":        true,
}

// Reference is one use of a resource, parameter or pseudo parameter by an intrinsic
// function.
type Reference struct {
	Path      string // where it is, e.g. Resources/JanitorFunction/Properties/Environment/Variables/LOCK_TABLE
	Kind      string // "Ref", "Fn::GetAtt" or "Fn::Sub"
	Target    string // logical id, parameter or pseudo parameter
	Attribute string // the attribute of Fn::GetAtt and ${X.Attr}; "" otherwise
}

// String describes the reference for test failures.
func (r Reference) String() string {
	t := r.Target
	if r.Attribute != "" {
		t += "." + r.Attribute
	}
	return fmt.Sprintf("%s %s at %s", r.Kind, t, r.Path)
}

// TemplateReferences returns every reference made in the template's Resources, Outputs,
// Globals and Conditions, in a stable order.
func TemplateReferences(t *template.Template) ([]Reference, error) {
	var refs []Reference
	for _, sec := range []string{"Conditions", "Globals", "Resources", "Outputs"} {
		r, err := References(t.Raw[sec], sec)
		if err != nil {
			return nil, err
		}
		refs = append(refs, r...)
	}
	sort.SliceStable(refs, func(i, j int) bool { return refs[i].Path < refs[j].Path })
	return refs, nil
}

// References walks a converted YAML value and returns the references its intrinsic
// functions make; path names the value's position.
func References(v any, path string) ([]Reference, error) {
	var out []Reference
	err := walkRefs(v, path, &out)
	return out, err
}

func walkRefs(v any, path string, out *[]Reference) error {
	switch x := v.(type) {
	case map[string]any:
		if len(x) == 1 {
			for k, arg := range x {
				switch k {
				case "Ref":
					s, ok := arg.(string)
					if !ok {
						return fmt.Errorf("%s: Ref argument is %T, want a string", path, arg)
					}
					*out = append(*out, Reference{Path: path, Kind: "Ref", Target: s})
					return nil
				case "Fn::GetAtt":
					res, attr, err := getAttArgs(arg)
					if err != nil {
						return fmt.Errorf("%s: %w", path, err)
					}
					*out = append(*out, Reference{Path: path, Kind: "Fn::GetAtt", Target: res, Attribute: attr})
					return nil
				case "Fn::Sub":
					return subRefs(arg, path, out)
				}
			}
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if err := walkRefs(x[k], path+"/"+k, out); err != nil {
				return err
			}
		}
	case []any:
		for i, e := range x {
			if err := walkRefs(e, fmt.Sprintf("%s[%d]", path, i), out); err != nil {
				return err
			}
		}
	}
	return nil
}

func getAttArgs(arg any) (resource, attribute string, err error) {
	switch a := arg.(type) {
	case string:
		r, at, ok := strings.Cut(a, ".")
		if !ok {
			return "", "", fmt.Errorf("Fn::GetAtt %q: want Resource.Attribute", a)
		}
		return r, at, nil
	case []any:
		if len(a) == 2 {
			r, ok1 := a[0].(string)
			at, ok2 := a[1].(string)
			if ok1 && ok2 {
				return r, at, nil
			}
		}
	}
	return "", "", fmt.Errorf("Fn::GetAtt argument %v: want [Resource, Attribute]", arg)
}

// subVar matches ${Name}, ${Name.Attr} and the literal ${!Text}.
var subVar = regexp.MustCompile(`\$\{([^}]*)\}`)

func subRefs(arg any, path string, out *[]Reference) error {
	var text string
	local := map[string]bool{}
	switch a := arg.(type) {
	case string:
		text = a
	case []any:
		if len(a) != 2 {
			return fmt.Errorf("%s: Fn::Sub list form needs [string, variables]", path)
		}
		s, ok := a[0].(string)
		vars, ok2 := a[1].(map[string]any)
		if !ok || !ok2 {
			return fmt.Errorf("%s: Fn::Sub list form needs [string, variables]", path)
		}
		text = s
		for k, v := range vars {
			local[k] = true
			if err := walkRefs(v, path+"/Fn::Sub/"+k, out); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("%s: Fn::Sub argument is %T", path, arg)
	}
	for _, m := range subVar.FindAllStringSubmatch(text, -1) {
		name := strings.TrimSpace(m[1])
		if strings.HasPrefix(name, "!") || local[name] {
			continue
		}
		r := Reference{Path: path, Kind: "Fn::Sub", Target: name}
		if res, attr, ok := strings.Cut(name, "."); ok && !PseudoParameters[name] {
			r.Target, r.Attribute = res, attr
		}
		*out = append(*out, r)
	}
	return nil
}

// isIntrinsic reports whether m is a long-form intrinsic function call.
func isIntrinsic(m map[string]any) bool {
	if len(m) != 1 {
		return false
	}
	for k := range m {
		return k == "Ref" || k == "Condition" || strings.HasPrefix(k, "Fn::")
	}
	return false
}

// Values resolves intrinsic functions to strings for a local run of the stack: what each
// Ref and Fn::GetAtt stands for there.
type Values struct {
	// Refs maps Ref targets (logical ids, parameters, pseudo parameters) to their values.
	Refs map[string]string
	// Attrs maps "LogicalId.Attribute" to the value of Fn::GetAtt.
	Attrs map[string]string
}

// Resolve returns the string value of a template value: scalars as text, and Ref,
// Fn::GetAtt, Fn::Sub and Fn::Join evaluated with v.
func (v Values) Resolve(x any) (string, error) {
	switch t := x.(type) {
	case string:
		return t, nil
	case int:
		return strconv.Itoa(t), nil
	case float64:
		return strconv.FormatFloat(t, 'f', -1, 64), nil
	case bool:
		return strconv.FormatBool(t), nil
	case nil:
		return "", nil
	case map[string]any:
		if !isIntrinsic(t) {
			return "", fmt.Errorf("cannot resolve a mapping to a string: %v", t)
		}
		for k, arg := range t {
			switch k {
			case "Ref":
				name, _ := arg.(string)
				val, ok := v.Refs[name]
				if !ok {
					return "", fmt.Errorf("no local value for Ref %s", name)
				}
				return val, nil
			case "Fn::GetAtt":
				res, attr, err := getAttArgs(arg)
				if err != nil {
					return "", err
				}
				val, ok := v.Attrs[res+"."+attr]
				if !ok {
					return "", fmt.Errorf("no local value for Fn::GetAtt %s.%s", res, attr)
				}
				return val, nil
			case "Fn::Sub":
				return v.sub(arg)
			case "Fn::Join":
				l, ok := arg.([]any)
				if !ok || len(l) != 2 {
					return "", fmt.Errorf("Fn::Join needs [delimiter, list]")
				}
				delim, _ := l[0].(string)
				items, ok := l[1].([]any)
				if !ok {
					return "", fmt.Errorf("Fn::Join list is %T", l[1])
				}
				parts := make([]string, 0, len(items))
				for _, it := range items {
					s, err := v.Resolve(it)
					if err != nil {
						return "", err
					}
					parts = append(parts, s)
				}
				return strings.Join(parts, delim), nil
			default:
				return "", fmt.Errorf("%s is not supported locally", k)
			}
		}
	}
	return "", fmt.Errorf("cannot resolve %T to a string", x)
}

func (v Values) sub(arg any) (string, error) {
	text, _ := arg.(string)
	local := map[string]string{}
	if l, ok := arg.([]any); ok && len(l) == 2 {
		text, _ = l[0].(string)
		vars, _ := l[1].(map[string]any)
		for k, x := range vars {
			s, err := v.Resolve(x)
			if err != nil {
				return "", err
			}
			local[k] = s
		}
	}
	var firstErr error
	out := subVar.ReplaceAllStringFunc(text, func(m string) string {
		name := strings.TrimSpace(m[2 : len(m)-1])
		if strings.HasPrefix(name, "!") {
			return "${" + name[1:] + "}"
		}
		if s, ok := local[name]; ok {
			return s
		}
		if s, ok := v.Refs[name]; ok {
			return s
		}
		if s, ok := v.Attrs[name]; ok {
			return s
		}
		if firstErr == nil {
			firstErr = fmt.Errorf("no local value for ${%s}", name)
		}
		return m
	})
	return out, firstErr
}

// ParameterDefaults returns the Default of every template parameter that has one, as text.
func ParameterDefaults(t *template.Template) map[string]string {
	out := map[string]string{}
	for name, p := range t.Parameters {
		m, _ := p.(map[string]any)
		if d, ok := m["Default"]; ok {
			if s, err := (Values{}).Resolve(d); err == nil {
				out[name] = s
			}
		}
	}
	return out
}
