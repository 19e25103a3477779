package lockcore

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// DynamoDB is the subset of the DynamoDB API that lockcore calls. *dynamodb.Client
// satisfies it; tests and fault injectors can wrap it.
type DynamoDB interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, optFns ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

var _ DynamoDB = (*dynamodb.Client)(nil)

// notSentError is the error of a request that was never sent because its context had
// already ended. Unlike a context that ends while a request is in flight (which may have
// landed), it is definite: nothing was written.
type notSentError struct{ cause error }

func (e *notSentError) Error() string { return "request not sent: " + e.cause.Error() }
func (e *notSentError) Unwrap() error { return e.cause }

// sendGuard refuses to send a request on an ended context, so that a write which was
// never sent is not taken for one that may have landed (which a take answers with a
// tombstone row, and a release with a re-read).
type sendGuard struct{ db DynamoDB }

// guarded wraps db in a sendGuard (once).
func guarded(db DynamoDB) DynamoDB {
	if _, ok := db.(sendGuard); ok || db == nil {
		return db
	}
	return sendGuard{db}
}

func ended(ctx context.Context) error {
	if ctx.Err() == nil {
		return nil
	}
	return &notSentError{cause: context.Cause(ctx)}
}

func (g sendGuard) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if err := ended(ctx); err != nil {
		return nil, err
	}
	return g.db.GetItem(ctx, in, o...)
}

func (g sendGuard) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if err := ended(ctx); err != nil {
		return nil, err
	}
	return g.db.PutItem(ctx, in, o...)
}

func (g sendGuard) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if err := ended(ctx); err != nil {
		return nil, err
	}
	return g.db.UpdateItem(ctx, in, o...)
}

func (g sendGuard) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	if err := ended(ctx); err != nil {
		return nil, err
	}
	return g.db.DeleteItem(ctx, in, o...)
}

func (g sendGuard) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	if err := ended(ctx); err != nil {
		return nil, err
	}
	return g.db.Query(ctx, in, o...)
}

func (g sendGuard) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	if err := ended(ctx); err != nil {
		return nil, err
	}
	return g.db.TransactWriteItems(ctx, in, o...)
}

// notStarted returns the error of an acquisition whose context ended before it began:
// it sends nothing and writes nothing, and the lock may well be free, so the error is
// the context's (not ErrLockHeld).
func notStarted(ctx context.Context, what string, key string) error {
	if ctx.Err() == nil {
		return nil
	}
	return fmt.Errorf("lockcore: %s %q: acquire not started: %w", what, key, context.Cause(ctx))
}
