package template

import (
	"reflect"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

func TestDecodeIntrinsics(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want any
	}{
		// Scalar forms.
		{"Ref", `!Ref Stage`, map[string]any{"Ref": "Stage"}},
		{"Condition", `!Condition IsProd`, map[string]any{"Condition": "IsProd"}},
		{"GetAtt dotted", `!GetAtt LockTable.StreamArn`, map[string]any{"Fn::GetAtt": []any{"LockTable", "StreamArn"}}},
		{"GetAtt nested attribute", `!GetAtt Db.Endpoint.Address`, map[string]any{"Fn::GetAtt": []any{"Db", "Endpoint.Address"}}},
		{"Sub string", `!Sub "turnstile-${Stage}-locks"`, map[string]any{"Fn::Sub": "turnstile-${Stage}-locks"}},
		{"GetAZs empty", `!GetAZs ""`, map[string]any{"Fn::GetAZs": ""}},
		{"GetAZs region", `!GetAZs us-east-1`, map[string]any{"Fn::GetAZs": "us-east-1"}},
		{"ImportValue", `!ImportValue SharedVpc`, map[string]any{"Fn::ImportValue": "SharedVpc"}},
		{"Base64 scalar", `!Base64 "#!/bin/sh"`, map[string]any{"Fn::Base64": "#!/bin/sh"}},
		{"Ref keeps numeric-looking text", `!Ref 123`, map[string]any{"Ref": "123"}},
		// Sequence forms.
		{"GetAtt list", `!GetAtt [LockTable, Arn]`, map[string]any{"Fn::GetAtt": []any{"LockTable", "Arn"}}},
		{"Sub list", "!Sub\n  - '${A}-x'\n  - A: b\n", map[string]any{"Fn::Sub": []any{"${A}-x", map[string]any{"A": "b"}}}},
		{"Join", `!Join ["-", [a, !Ref B]]`, map[string]any{"Fn::Join": []any{"-", []any{"a", map[string]any{"Ref": "B"}}}}},
		{"Select", `!Select [0, !GetAZs ""]`, map[string]any{"Fn::Select": []any{0, map[string]any{"Fn::GetAZs": ""}}}},
		{"Split", `!Split [",", "a,b"]`, map[string]any{"Fn::Split": []any{",", "a,b"}}},
		{"If", `!If [IsProd, 5, !Ref "AWS::NoValue"]`, map[string]any{"Fn::If": []any{"IsProd", 5, map[string]any{"Ref": "AWS::NoValue"}}}},
		{"Equals", `!Equals [!Ref Stage, prod]`, map[string]any{"Fn::Equals": []any{map[string]any{"Ref": "Stage"}, "prod"}}},
		{"Not", `!Not [!Condition IsProd]`, map[string]any{"Fn::Not": []any{map[string]any{"Condition": "IsProd"}}}},
		{"And", `!And [!Condition A, !Condition B]`, map[string]any{"Fn::And": []any{map[string]any{"Condition": "A"}, map[string]any{"Condition": "B"}}}},
		{"Or", `!Or [!Condition A, true]`, map[string]any{"Fn::Or": []any{map[string]any{"Condition": "A"}, true}}},
		{"FindInMap", `!FindInMap [Map, !Ref Stage, Size]`, map[string]any{"Fn::FindInMap": []any{"Map", map[string]any{"Ref": "Stage"}, "Size"}}},
		{"Cidr", `!Cidr [10.0.0.0/16, 4, 8]`, map[string]any{"Fn::Cidr": []any{"10.0.0.0/16", 4, 8}}},
		{"Base64 nested", `!Base64 {"Fn::Sub": "x"}`, map[string]any{"Fn::Base64": map[string]any{"Fn::Sub": "x"}}},
		// Mapping forms.
		{"ImportValue mapping", "!ImportValue\n  Fn::Sub: '${Stage}-vpc'\n", map[string]any{"Fn::ImportValue": map[string]any{"Fn::Sub": "${Stage}-vpc"}}},
		{"GetAZs mapping", "!GetAZs {Ref: AWS::Region}", map[string]any{"Fn::GetAZs": map[string]any{"Ref": "AWS::Region"}}},
		// Nested in ordinary YAML, and plain values untouched.
		{"in mapping", "A: !Ref B\nC: [1, 2.5, true, null, text]\n", map[string]any{
			"A": map[string]any{"Ref": "B"},
			"C": []any{1, 2.5, true, nil, "text"},
		}},
		{"long forms untouched", `{"Fn::GetAtt": [X, Arn], Ref: Y}`, map[string]any{"Fn::GetAtt": []any{"X", "Arn"}, "Ref": "Y"}},
		{"anchors and merge", "base: &b {x: 1}\nd:\n  <<: *b\n  y: !Ref Z\n", map[string]any{
			"base": map[string]any{"x": 1},
			"d":    map[string]any{"x": 1, "y": map[string]any{"Ref": "Z"}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Decode([]byte(tt.yaml))
			if err != nil {
				t.Fatalf("Decode(%q): %v", tt.yaml, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Decode(%q)\n got %#v\nwant %#v", tt.yaml, got, tt.want)
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, y := range []string{
		"!GetAtt NoDot",
		"!GetAtt .Arn",
		"!Unknown x",
		"a: [unclosed",
		"",
	} {
		if v, err := Decode([]byte(y)); err == nil {
			t.Errorf("Decode(%q) = %#v, want an error", y, v)
		}
	}
}

func TestLoadDefault(t *testing.T) {
	tpl, err := LoadDefault()
	if err != nil {
		t.Fatal(err)
	}
	if tpl.FormatVersion != "2010-09-09" || tpl.Transform != "AWS::Serverless-2016-10-31" {
		t.Errorf("header: version %q, transform %v", tpl.FormatVersion, tpl.Transform)
	}
	lock, ok := tpl.Resources["LockTable"]
	if !ok || lock.Type != TableType {
		t.Fatalf("LockTable resource = %+v", lock)
	}
	// !Sub must survive as its long form, not be flattened to a plain string.
	if got, want := lock.Properties["TableName"], map[string]any{"Fn::Sub": "turnstile-${Stage}-locks"}; !reflect.DeepEqual(got, want) {
		t.Errorf("LockTable TableName = %#v, want %#v", got, want)
	}
	if _, ok := tpl.Parameters["Stage"]; !ok {
		t.Error("parameter Stage missing")
	}
	out, _ := tpl.Outputs["LockTableStreamArn"].(map[string]any)
	if got, want := out["Value"], map[string]any{"Fn::GetAtt": []any{"LockTable", "StreamArn"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("LockTableStreamArn Value = %#v, want %#v", got, want)
	}

	specs, err := tpl.Tables()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range specs {
		ids = append(ids, s.LogicalID)
	}
	if got := strings.Join(ids, ","); got != "InventoryTable,LockTable,OrdersTable" {
		t.Errorf("Tables() = %s", got)
	}
}

func TestTableSpec(t *testing.T) {
	tpl, err := LoadDefault()
	if err != nil {
		t.Fatal(err)
	}
	spec, err := tpl.Table("LockTable")
	if err != nil {
		t.Fatal(err)
	}
	if spec.HashKey() != "pk" || spec.RangeKey() != "sk" || spec.TTLAttribute != "expiresAt" ||
		spec.StreamViewType != types.StreamViewTypeOldImage || spec.BillingMode != "PAY_PER_REQUEST" {
		t.Errorf("LockTable spec = %+v", spec)
	}
	in := spec.CreateTableInput("locks-1")
	if aws.ToString(in.TableName) != "locks-1" || in.BillingMode != types.BillingModePayPerRequest ||
		in.StreamSpecification == nil || !aws.ToBool(in.StreamSpecification.StreamEnabled) ||
		in.StreamSpecification.StreamViewType != types.StreamViewTypeOldImage || len(in.KeySchema) != 2 {
		t.Errorf("CreateTableInput = %+v", in)
	}
	ttl := spec.TTLInput("locks-1")
	if ttl == nil || aws.ToString(ttl.TimeToLiveSpecification.AttributeName) != "expiresAt" {
		t.Errorf("TTLInput = %+v", ttl)
	}

	orders, err := tpl.Table("OrdersTable")
	if err != nil {
		t.Fatal(err)
	}
	if orders.TTLInput("o") != nil || orders.CreateTableInput("o").StreamSpecification != nil || orders.RangeKey() != "" {
		t.Errorf("OrdersTable spec = %+v", orders)
	}
	if _, err := tpl.Table("Nope"); err == nil {
		t.Error("Table(Nope) succeeded")
	}
}

func TestTableIndexes(t *testing.T) {
	tpl, err := Parse([]byte(`
Resources:
  T:
    Type: AWS::DynamoDB::Table
    Properties:
      AttributeDefinitions:
        - {AttributeName: pk, AttributeType: S}
        - {AttributeName: sk, AttributeType: S}
        - {AttributeName: g, AttributeType: N}
      KeySchema:
        - {AttributeName: pk, KeyType: HASH}
        - {AttributeName: sk, KeyType: RANGE}
      GlobalSecondaryIndexes:
        - IndexName: byG
          KeySchema: [{AttributeName: g, KeyType: HASH}]
          Projection: {ProjectionType: INCLUDE, NonKeyAttributes: [a, b]}
      LocalSecondaryIndexes:
        - IndexName: byPkG
          KeySchema: [{AttributeName: pk, KeyType: HASH}, {AttributeName: g, KeyType: RANGE}]
          Projection: {ProjectionType: KEYS_ONLY}
      TimeToLiveSpecification: {AttributeName: ttl, Enabled: false}
      StreamSpecification: {StreamViewType: NEW_AND_OLD_IMAGES}
  Q:
    Type: AWS::SQS::Queue
  Bad:
    Type: AWS::DynamoDB::Table
    Properties:
      KeySchema: [{AttributeName: !Ref P, KeyType: HASH}]
`))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := tpl.Table("T")
	if err != nil {
		t.Fatal(err)
	}
	in := spec.CreateTableInput("t")
	if len(in.GlobalSecondaryIndexes) != 1 || aws.ToString(in.GlobalSecondaryIndexes[0].IndexName) != "byG" ||
		in.GlobalSecondaryIndexes[0].Projection.ProjectionType != types.ProjectionTypeInclude ||
		!reflect.DeepEqual(in.GlobalSecondaryIndexes[0].Projection.NonKeyAttributes, []string{"a", "b"}) {
		t.Errorf("GSIs = %+v", in.GlobalSecondaryIndexes)
	}
	if len(in.LocalSecondaryIndexes) != 1 || len(in.LocalSecondaryIndexes[0].KeySchema) != 2 ||
		in.LocalSecondaryIndexes[0].Projection.ProjectionType != types.ProjectionTypeKeysOnly {
		t.Errorf("LSIs = %+v", in.LocalSecondaryIndexes)
	}
	if spec.TTLInput("t") != nil {
		t.Error("disabled TTL produced a TTLInput")
	}
	if in.StreamSpecification.StreamViewType != types.StreamViewTypeNewAndOldImages {
		t.Errorf("stream = %+v", in.StreamSpecification)
	}
	if _, err := tpl.Table("Q"); err == nil {
		t.Error("Table(Q) accepted an SQS queue")
	}
	if _, err := tpl.Table("Bad"); err == nil || !strings.Contains(err.Error(), "literal") {
		t.Errorf("Table(Bad) error = %v, want a literal-value error", err)
	}
	if _, err := tpl.Tables(); err == nil {
		t.Error("Tables() ignored the bad table")
	}
}
