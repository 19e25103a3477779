package template

import (
	"fmt"
	"sort"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// TableType is the resource type of DynamoDB tables.
const TableType = "AWS::DynamoDB::Table"

// TableSpec is the part of an AWS::DynamoDB::Table resource needed to create the table
// on a local engine.
type TableSpec struct {
	LogicalID string
	// TableName is the raw TableName property (often an intrinsic such as
	// {"Fn::Sub": "turnstile-${Stage}-locks"}); nil when absent.
	TableName              any
	KeySchema              []types.KeySchemaElement
	AttributeDefinitions   []types.AttributeDefinition
	GlobalSecondaryIndexes []types.GlobalSecondaryIndex
	LocalSecondaryIndexes  []types.LocalSecondaryIndex
	// BillingMode as written in the template ("" when absent, meaning PROVISIONED).
	BillingMode string
	// TTLAttribute is the enabled TimeToLiveSpecification attribute, "" when TTL is off.
	TTLAttribute string
	// StreamViewType is the StreamSpecification view type, "" when the table has no stream.
	StreamViewType types.StreamViewType
}

// HashKey returns the name of the partition key.
func (s TableSpec) HashKey() string { return s.key(types.KeyTypeHash) }

// RangeKey returns the name of the sort key, "" when there is none.
func (s TableSpec) RangeKey() string { return s.key(types.KeyTypeRange) }

func (s TableSpec) key(kt types.KeyType) string {
	for _, k := range s.KeySchema {
		if k.KeyType == kt {
			return aws.ToString(k.AttributeName)
		}
	}
	return ""
}

// Tables returns the specs of every AWS::DynamoDB::Table resource, sorted by logical id.
func (t *Template) Tables() ([]TableSpec, error) {
	var ids []string
	for id, r := range t.Resources {
		if r.Type == TableType {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	specs := make([]TableSpec, 0, len(ids))
	for _, id := range ids {
		s, err := t.Table(id)
		if err != nil {
			return nil, err
		}
		specs = append(specs, s)
	}
	return specs, nil
}

// Table returns the spec of the AWS::DynamoDB::Table resource logicalID.
func (t *Template) Table(logicalID string) (TableSpec, error) {
	r, ok := t.Resources[logicalID]
	if !ok {
		return TableSpec{}, fmt.Errorf("table %s: no such resource in template", logicalID)
	}
	if r.Type != TableType {
		return TableSpec{}, fmt.Errorf("table %s: resource type is %s, want %s", logicalID, r.Type, TableType)
	}
	p := props{id: logicalID, m: r.Properties}
	s := TableSpec{LogicalID: logicalID, TableName: r.Properties["TableName"]}
	var err error
	if s.BillingMode, err = p.optString("BillingMode"); err != nil {
		return TableSpec{}, err
	}
	if s.KeySchema, err = keySchema(p, "KeySchema"); err != nil {
		return TableSpec{}, err
	}
	if len(s.KeySchema) == 0 {
		return TableSpec{}, fmt.Errorf("table %s: KeySchema is missing", logicalID)
	}
	defs, err := p.list("AttributeDefinitions")
	if err != nil {
		return TableSpec{}, err
	}
	for i := range defs {
		d := props{id: fmt.Sprintf("%s.AttributeDefinitions[%d]", logicalID, i), m: defs[i]}
		name, err := d.string("AttributeName")
		if err != nil {
			return TableSpec{}, err
		}
		typ, err := d.string("AttributeType")
		if err != nil {
			return TableSpec{}, err
		}
		s.AttributeDefinitions = append(s.AttributeDefinitions, types.AttributeDefinition{
			AttributeName: aws.String(name), AttributeType: types.ScalarAttributeType(typ),
		})
	}

	gsis, err := p.list("GlobalSecondaryIndexes")
	if err != nil {
		return TableSpec{}, err
	}
	for i := range gsis {
		ix, err := index(props{id: fmt.Sprintf("%s.GlobalSecondaryIndexes[%d]", logicalID, i), m: gsis[i]})
		if err != nil {
			return TableSpec{}, err
		}
		s.GlobalSecondaryIndexes = append(s.GlobalSecondaryIndexes, types.GlobalSecondaryIndex{
			IndexName: ix.name, KeySchema: ix.keys, Projection: ix.projection,
		})
	}
	lsis, err := p.list("LocalSecondaryIndexes")
	if err != nil {
		return TableSpec{}, err
	}
	for i := range lsis {
		ix, err := index(props{id: fmt.Sprintf("%s.LocalSecondaryIndexes[%d]", logicalID, i), m: lsis[i]})
		if err != nil {
			return TableSpec{}, err
		}
		s.LocalSecondaryIndexes = append(s.LocalSecondaryIndexes, types.LocalSecondaryIndex{
			IndexName: ix.name, KeySchema: ix.keys, Projection: ix.projection,
		})
	}

	if ttl, err := p.optMap("TimeToLiveSpecification"); err != nil {
		return TableSpec{}, err
	} else if ttl != nil {
		tp := props{id: logicalID + ".TimeToLiveSpecification", m: ttl}
		enabled, err := tp.optBool("Enabled")
		if err != nil {
			return TableSpec{}, err
		}
		if enabled {
			if s.TTLAttribute, err = tp.string("AttributeName"); err != nil {
				return TableSpec{}, err
			}
		}
	}
	if stream, err := p.optMap("StreamSpecification"); err != nil {
		return TableSpec{}, err
	} else if stream != nil {
		sp := props{id: logicalID + ".StreamSpecification", m: stream}
		view, err := sp.string("StreamViewType")
		if err != nil {
			return TableSpec{}, err
		}
		s.StreamViewType = types.StreamViewType(view)
	}
	return s, nil
}

// CreateTableInput returns the input creating this table under name: on-demand billing
// (whatever the template says about capacity), with its indexes and, when the template has
// one, a stream of the template's view type. TTL needs a separate call: see TTLInput.
func (s TableSpec) CreateTableInput(name string) *dynamodb.CreateTableInput {
	in := &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		BillingMode:          types.BillingModePayPerRequest,
		KeySchema:            append([]types.KeySchemaElement(nil), s.KeySchema...),
		AttributeDefinitions: append([]types.AttributeDefinition(nil), s.AttributeDefinitions...),
	}
	for _, g := range s.GlobalSecondaryIndexes {
		g.KeySchema = append([]types.KeySchemaElement(nil), g.KeySchema...)
		in.GlobalSecondaryIndexes = append(in.GlobalSecondaryIndexes, g)
	}
	for _, l := range s.LocalSecondaryIndexes {
		l.KeySchema = append([]types.KeySchemaElement(nil), l.KeySchema...)
		in.LocalSecondaryIndexes = append(in.LocalSecondaryIndexes, l)
	}
	if s.StreamViewType != "" {
		in.StreamSpecification = &types.StreamSpecification{
			StreamEnabled:  aws.Bool(true),
			StreamViewType: s.StreamViewType,
		}
	}
	return in
}

// TTLInput returns the input enabling TTL on table name, or nil when the template has no
// enabled TimeToLiveSpecification.
func (s TableSpec) TTLInput(name string) *dynamodb.UpdateTimeToLiveInput {
	if s.TTLAttribute == "" {
		return nil
	}
	return &dynamodb.UpdateTimeToLiveInput{
		TableName: aws.String(name),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{
			AttributeName: aws.String(s.TTLAttribute),
			Enabled:       aws.Bool(true),
		},
	}
}

type indexSpec struct {
	name       *string
	keys       []types.KeySchemaElement
	projection *types.Projection
}

func index(p props) (indexSpec, error) {
	name, err := p.string("IndexName")
	if err != nil {
		return indexSpec{}, err
	}
	keys, err := keySchema(p, "KeySchema")
	if err != nil {
		return indexSpec{}, err
	}
	proj := &types.Projection{ProjectionType: types.ProjectionTypeAll}
	pm, err := p.optMap("Projection")
	if err != nil {
		return indexSpec{}, err
	}
	if pm != nil {
		pp := props{id: p.id + ".Projection", m: pm}
		typ, err := pp.optString("ProjectionType")
		if err != nil {
			return indexSpec{}, err
		}
		if typ != "" {
			proj.ProjectionType = types.ProjectionType(typ)
		}
		attrs, err := pp.optStrings("NonKeyAttributes")
		if err != nil {
			return indexSpec{}, err
		}
		proj.NonKeyAttributes = attrs
	}
	return indexSpec{name: aws.String(name), keys: keys, projection: proj}, nil
}

func keySchema(p props, key string) ([]types.KeySchemaElement, error) {
	elems, err := p.list(key)
	if err != nil {
		return nil, err
	}
	var out []types.KeySchemaElement
	for i := range elems {
		e := props{id: fmt.Sprintf("%s.%s[%d]", p.id, key, i), m: elems[i]}
		name, err := e.string("AttributeName")
		if err != nil {
			return nil, err
		}
		kt, err := e.string("KeyType")
		if err != nil {
			return nil, err
		}
		out = append(out, types.KeySchemaElement{AttributeName: aws.String(name), KeyType: types.KeyType(kt)})
	}
	return out, nil
}

// props reads literal values from a property mapping; intrinsics are rejected with an error
// naming the property, since a local engine cannot resolve them.
type props struct {
	id string
	m  map[string]any
}

func (p props) string(key string) (string, error) {
	v, ok := p.m[key]
	if !ok {
		return "", fmt.Errorf("table %s: %s is missing", p.id, key)
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("table %s: %s must be a literal string, got %v", p.id, key, v)
	}
	return s, nil
}

func (p props) optString(key string) (string, error) {
	if _, ok := p.m[key]; !ok {
		return "", nil
	}
	return p.string(key)
}

func (p props) optBool(key string) (bool, error) {
	v, ok := p.m[key]
	if !ok {
		return false, nil
	}
	switch b := v.(type) {
	case bool:
		return b, nil
	case string: // CloudFormation accepts "true"/"false"
		switch b {
		case "true", "True", "TRUE":
			return true, nil
		case "false", "False", "FALSE":
			return false, nil
		}
	}
	return false, fmt.Errorf("table %s: %s must be a literal boolean, got %v", p.id, key, v)
}

func (p props) optMap(key string) (map[string]any, error) {
	v, ok := p.m[key]
	if !ok || v == nil {
		return nil, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("table %s: %s must be a mapping, got %v", p.id, key, v)
	}
	return m, nil
}

func (p props) list(key string) ([]map[string]any, error) {
	v, ok := p.m[key]
	if !ok || v == nil {
		return nil, nil
	}
	s, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("table %s: %s must be a list, got %v", p.id, key, v)
	}
	out := make([]map[string]any, 0, len(s))
	for i, x := range s {
		m, ok := x.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("table %s: %s[%d] must be a mapping, got %v", p.id, key, i, x)
		}
		out = append(out, m)
	}
	return out, nil
}

func (p props) optStrings(key string) ([]string, error) {
	v, ok := p.m[key]
	if !ok || v == nil {
		return nil, nil
	}
	s, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("table %s: %s must be a list, got %v", p.id, key, v)
	}
	out := make([]string, 0, len(s))
	for i, x := range s {
		str, ok := x.(string)
		if !ok {
			return nil, fmt.Errorf("table %s: %s[%d] must be a literal string, got %v", p.id, key, i, x)
		}
		out = append(out, str)
	}
	return out, nil
}
