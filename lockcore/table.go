package lockcore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// TableAdmin is the part of the DynamoDB API that CreateLockTable calls. *dynamodb.Client
// satisfies it.
type TableAdmin interface {
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
}

var _ TableAdmin = (*dynamodb.Client)(nil)

// TableOption configures CreateLockTable.
type TableOption func(*tableConfig) error

type tableConfig struct {
	names    TableAttributes
	stream   bool
	wait     time.Duration
	tags     []types.Tag
	provided *types.ProvisionedThroughput
}

// WithStream enables the table's stream with old images, which a janitor needs to see
// lock rows that TTL removed while still held (crashed holders).
func WithStream() TableOption {
	return func(c *tableConfig) error { c.stream = true; return nil }
}

// WithProvisioned uses provisioned capacity instead of on-demand (the default).
func WithProvisioned(read, write int64) TableOption {
	return func(c *tableConfig) error {
		if read <= 0 || write <= 0 {
			return invalidOption("provisioned", "read and write capacity must be positive, got %d and %d", read, write)
		}
		c.provided = &types.ProvisionedThroughput{ReadCapacityUnits: aws.Int64(read), WriteCapacityUnits: aws.Int64(write)}
		return nil
	}
}

// WithTags tags the table.
func WithTags(tags map[string]string) TableOption {
	return func(c *tableConfig) error {
		for k, v := range tags {
			c.tags = append(c.tags, types.Tag{Key: aws.String(k), Value: aws.String(v)})
		}
		return nil
	}
}

// WithCreateTimeout bounds the wait for the new table to become active (default 5m).
func WithCreateTimeout(d time.Duration) TableOption {
	return func(c *tableConfig) error {
		if d <= 0 {
			return invalidOption("createTimeout", "must be positive, got %s", d)
		}
		c.wait = d
		return nil
	}
}

// CreateLockTable creates a lock table for Mutex, TicketLock and Queue: string keys "pk"
// (hash) and "sk" (range), on-demand capacity, and TTL on "expiresAt" (other names with
// WithAttributes, the clients' WithTableAttributes). It waits until the
// table is active and TTL is on. A table that already exists with that key schema is
// accepted as it is (TTL is still turned on); one with another schema is an error.
//
// The same table in CloudFormation (as in docs/using-lockcore.md):
//
//	LockTable:
//	  Type: AWS::DynamoDB::Table
//	  Properties:
//	    BillingMode: PAY_PER_REQUEST
//	    AttributeDefinitions:
//	      - {AttributeName: pk, AttributeType: S}
//	      - {AttributeName: sk, AttributeType: S}
//	    KeySchema:
//	      - {AttributeName: pk, KeyType: HASH}
//	      - {AttributeName: sk, KeyType: RANGE}
//	    TimeToLiveSpecification: {AttributeName: expiresAt, Enabled: true}
//	    StreamSpecification: {StreamViewType: OLD_IMAGE}   # only for a janitor
func CreateLockTable(ctx context.Context, db TableAdmin, name string, opts ...TableOption) error {
	if db == nil {
		return invalidOption("db", "must not be nil")
	}
	if name == "" {
		return invalidOption("table", "must not be empty")
	}
	cfg := &tableConfig{names: DefaultTableAttributes, wait: 5 * time.Minute}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(cfg); err != nil {
			return err
		}
	}
	in := &dynamodb.CreateTableInput{
		TableName: aws.String(name),
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String(cfg.names.PartitionKey), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String(cfg.names.SortKey), AttributeType: types.ScalarAttributeTypeS},
		},
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(cfg.names.PartitionKey), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(cfg.names.SortKey), KeyType: types.KeyTypeRange},
		},
		BillingMode: types.BillingModePayPerRequest,
		Tags:        cfg.tags,
	}
	if cfg.provided != nil {
		in.BillingMode, in.ProvisionedThroughput = types.BillingModeProvisioned, cfg.provided
	}
	if cfg.stream {
		in.StreamSpecification = &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewTypeOldImage}
	}
	_, err := db.CreateTable(ctx, in)
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return fmt.Errorf("lockcore: create lock table %s: %w", name, err)
	}
	wctx, cancel := context.WithTimeout(ctx, cfg.wait)
	defer cancel()
	for {
		out, err := db.DescribeTable(wctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
		if err != nil {
			return fmt.Errorf("lockcore: create lock table %s: describe: %w", name, err)
		}
		if err := checkLockSchema(out.Table, cfg.names); err != nil {
			return fmt.Errorf("lockcore: table %s exists but is no lock table: %w", name, err)
		}
		if out.Table.TableStatus == types.TableStatusActive {
			break
		}
		if err := sleep(wctx, 500*time.Millisecond); err != nil {
			return fmt.Errorf("lockcore: create lock table %s: waiting until active: %w", name, err)
		}
	}
	_, err = db.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName:               aws.String(name),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String(cfg.names.TTL), Enabled: aws.Bool(true)},
	})
	if err != nil && !isTTLAlreadyOn(err) {
		return fmt.Errorf("lockcore: create lock table %s: enable TTL on %s: %w", name, cfg.names.TTL, err)
	}
	return nil
}

func checkLockSchema(t *types.TableDescription, names TableAttributes) error {
	pk, sk := names.PartitionKey, names.SortKey
	want := map[string]types.KeyType{pk: types.KeyTypeHash, sk: types.KeyTypeRange}
	if t == nil || len(t.KeySchema) != len(want) {
		return fmt.Errorf("want keys %s (hash) and %s (range)", pk, sk)
	}
	for _, k := range t.KeySchema {
		if want[aws.ToString(k.AttributeName)] != k.KeyType {
			return fmt.Errorf("want keys %s (hash) and %s (range), found %s (%s)", pk, sk, aws.ToString(k.AttributeName), k.KeyType)
		}
	}
	for _, d := range t.AttributeDefinitions {
		if _, isKey := want[aws.ToString(d.AttributeName)]; isKey && d.AttributeType != types.ScalarAttributeTypeS {
			return fmt.Errorf("key %s must be a string, is %s", aws.ToString(d.AttributeName), d.AttributeType)
		}
	}
	return nil
}

// isTTLAlreadyOn recognises UpdateTimeToLive's complaint that TTL is already enabled.
func isTTLAlreadyOn(err error) bool {
	var api interface{ ErrorMessage() string }
	return errors.As(err, &api) && strings.Contains(strings.ToLower(api.ErrorMessage()), "already enabled")
}
