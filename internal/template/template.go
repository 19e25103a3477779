// Package template reads the SAM/CloudFormation template (template.yaml), the single source
// of truth for the project's table definitions.
//
// The YAML is read through yaml.Node so that short-form intrinsic functions (!Ref, !GetAtt,
// !Sub, ...) become their long forms ({"Ref": ...}, {"Fn::GetAtt": [...]}, {"Fn::Sub": ...})
// instead of being silently flattened to plain strings, as yaml.Unmarshal into any would do.
package template

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"
)

// Template is a parsed template. The section maps hold the converted YAML: map[string]any,
// []any, string, int, float64, bool and nil values, with intrinsics in long form.
type Template struct {
	// Path is the file the template was loaded from ("" for Parse).
	Path string

	FormatVersion string
	Transform     any
	Description   string
	Parameters    map[string]any
	Mappings      map[string]any
	Conditions    map[string]any
	Globals       map[string]any
	Resources     map[string]Resource
	Outputs       map[string]any

	// Raw is the whole document.
	Raw map[string]any
}

// Resource is one entry of the Resources section.
type Resource struct {
	Type       string
	Properties map[string]any
	// Raw is the whole resource (Type, Properties, Condition, DependsOn, Metadata, ...).
	Raw map[string]any
}

// FindRoot returns the project root: the nearest directory, starting at the working
// directory and walking up, that contains a go.mod file.
func FindRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find project root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("find project root: no go.mod in the working directory or any parent")
		}
		dir = parent
	}
}

// LoadDefault loads template.yaml from the project root.
func LoadDefault() (*Template, error) {
	root, err := FindRoot()
	if err != nil {
		return nil, err
	}
	return Load(filepath.Join(root, "template.yaml"))
}

// Load reads and parses the template at path.
func Load(path string) (*Template, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load template: %w", err)
	}
	t, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("load template %s: %w", path, err)
	}
	t.Path = path
	return t, nil
}

// Parse parses a template document.
func Parse(data []byte) (*Template, error) {
	v, err := Decode(data)
	if err != nil {
		return nil, err
	}
	doc, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("template: top level is %T, want a mapping", v)
	}
	t := &Template{Raw: doc, Transform: doc["Transform"], Resources: map[string]Resource{}}
	if t.FormatVersion, err = optString(doc, "AWSTemplateFormatVersion"); err != nil {
		return nil, err
	}
	if t.Description, err = optString(doc, "Description"); err != nil {
		return nil, err
	}
	for name, dst := range map[string]*map[string]any{
		"Parameters": &t.Parameters, "Mappings": &t.Mappings, "Conditions": &t.Conditions,
		"Globals": &t.Globals, "Outputs": &t.Outputs,
	} {
		if *dst, err = optMap(doc, name); err != nil {
			return nil, err
		}
	}
	resources, err := optMap(doc, "Resources")
	if err != nil {
		return nil, err
	}
	for id, r := range resources {
		raw, ok := r.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("resource %s: is %T, want a mapping", id, r)
		}
		typ, ok := raw["Type"].(string)
		if !ok {
			return nil, fmt.Errorf("resource %s: missing or non-string Type", id)
		}
		props, err := optMap(raw, "Properties")
		if err != nil {
			return nil, fmt.Errorf("resource %s: %w", id, err)
		}
		t.Resources[id] = Resource{Type: typ, Properties: props, Raw: raw}
	}
	return t, nil
}

func optString(m map[string]any, key string) (string, error) {
	v, ok := m[key]
	if !ok || v == nil {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s: is %T, want a string", key, v)
	}
	return s, nil
}

func optMap(m map[string]any, key string) (map[string]any, error) {
	v, ok := m[key]
	if !ok || v == nil {
		return map[string]any{}, nil
	}
	mm, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: is %T, want a mapping", key, v)
	}
	return mm, nil
}

// Decode parses one YAML document into plain Go values, converting short-form intrinsic
// function tags into their long forms.
func Decode(data []byte) (any, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("parse yaml: %w", err)
	}
	if doc.Kind == 0 {
		return nil, errors.New("parse yaml: empty document")
	}
	return convert(&doc)
}

// intrinsics maps short-form tags to their long-form keys.
var intrinsics = map[string]string{
	"!Ref":          "Ref",
	"!Condition":    "Condition",
	"!GetAtt":       "Fn::GetAtt",
	"!Sub":          "Fn::Sub",
	"!Join":         "Fn::Join",
	"!Select":       "Fn::Select",
	"!Split":        "Fn::Split",
	"!If":           "Fn::If",
	"!Equals":       "Fn::Equals",
	"!Not":          "Fn::Not",
	"!And":          "Fn::And",
	"!Or":           "Fn::Or",
	"!FindInMap":    "Fn::FindInMap",
	"!GetAZs":       "Fn::GetAZs",
	"!ImportValue":  "Fn::ImportValue",
	"!Base64":       "Fn::Base64",
	"!Cidr":         "Fn::Cidr",
	"!Transform":    "Fn::Transform",
	"!Length":       "Fn::Length",
	"!ToJsonString": "Fn::ToJsonString",
}

func convert(n *yaml.Node) (any, error) {
	if n.Kind != yaml.DocumentNode && n.Kind != yaml.AliasNode && strings.HasPrefix(n.Tag, "!") &&
		!strings.HasPrefix(n.Tag, "!!") {
		return convertTagged(n)
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil, nil
		}
		return convert(n.Content[0])
	case yaml.AliasNode:
		return convert(n.Alias)
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
				if err := merge(m, v); err != nil {
					return nil, err
				}
				continue
			}
			if k.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("line %d: mapping key is not a scalar", k.Line)
			}
			val, err := convert(v)
			if err != nil {
				return nil, err
			}
			m[k.Value] = val
		}
		return m, nil
	case yaml.SequenceNode:
		s := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := convert(c)
			if err != nil {
				return nil, err
			}
			s = append(s, v)
		}
		return s, nil
	case yaml.ScalarNode:
		var v any
		if err := n.Decode(&v); err != nil {
			return nil, fmt.Errorf("line %d: %w", n.Line, err)
		}
		return v, nil
	}
	return nil, fmt.Errorf("line %d: unexpected yaml node kind %v", n.Line, n.Kind)
}

// merge applies a YAML merge key (<<: *alias or a list of aliases) to m.
func merge(m map[string]any, v *yaml.Node) error {
	src, err := convert(v)
	if err != nil {
		return err
	}
	maps := []any{src}
	if s, ok := src.([]any); ok {
		maps = s
	}
	for _, x := range maps {
		mm, ok := x.(map[string]any)
		if !ok {
			return fmt.Errorf("line %d: merge value is not a mapping", v.Line)
		}
		for k, val := range mm {
			if _, exists := m[k]; !exists {
				m[k] = val
			}
		}
	}
	return nil
}

// convertTagged converts a node with a short-form intrinsic tag.
func convertTagged(n *yaml.Node) (any, error) {
	key, ok := intrinsics[n.Tag]
	if !ok {
		return nil, fmt.Errorf("line %d: unsupported tag %s", n.Line, n.Tag)
	}
	var val any
	if n.Kind == yaml.ScalarNode {
		// The argument of a tagged scalar is its text (e.g. !Ref Stage, !GetAZs "").
		val = n.Value
		if key == "Fn::GetAtt" {
			res, attr, ok := strings.Cut(n.Value, ".")
			if !ok || res == "" || attr == "" {
				return nil, fmt.Errorf("line %d: !GetAtt %q: want Resource.Attribute", n.Line, n.Value)
			}
			val = []any{res, attr}
		}
	} else {
		plain := *n
		plain.Tag = ""
		var err error
		if val, err = convert(&plain); err != nil {
			return nil, err
		}
	}
	return map[string]any{key: val}, nil
}
