package shop

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

// maxTransactItems is DynamoDB's limit of items in one TransactWriteItems.
const maxTransactItems = 100

// txAttempts bounds the attempts of one transaction (conflicts, throttling, ambiguous
// failures); every attempt carries the same ClientRequestToken, so a repeat of an
// attempt that landed is answered with success instead of being applied twice.
const txAttempts = 5

// txResult is the outcome of transact.
type txResult struct {
	failed    int   // index of the first item whose condition failed; -1 if none
	all       []int // indexes of every item whose condition failed
	ambiguous bool  // an earlier attempt may have landed
}

// transact runs one TransactWriteItems. On a condition failure it returns an error and
// the failed item's index.
func (s *Service) transact(ctx context.Context, items []types.TransactWriteItem) (txResult, error) {
	res := txResult{failed: -1}
	token := randomHex(16)
	wait := 15 * time.Millisecond
	var last error
	for attempt := 0; attempt < txAttempts; attempt++ {
		if attempt > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return res, fmt.Errorf("shop: transaction: %w (last error: %v)", ctx.Err(), last)
			case <-t.C:
			}
			wait = min(2*wait, 250*time.Millisecond)
		}
		_, err := s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{
			TransactItems:      items,
			ClientRequestToken: aws.String(token),
		})
		if err == nil {
			return res, nil
		}
		last = err
		if codes := txReasons(err); codes != nil {
			for i, c := range codes {
				if c == "ConditionalCheckFailed" {
					res.all = append(res.all, i)
				}
			}
			if len(res.all) > 0 {
				res.failed = res.all[0]
				return res, fmt.Errorf("shop: transaction: condition of item %d failed: %w", res.failed, err)
			}
			continue // TransactionConflict, throttling: nothing applied
		}
		var api smithy.APIError
		if errors.As(err, &api) {
			switch api.ErrorCode() {
			case "TransactionInProgressException", "TransactionConflictException",
				"ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded",
				"LimitExceededException":
				continue
			}
			if api.ErrorFault() == smithy.FaultClient {
				return res, fmt.Errorf("shop: transaction: %w", err)
			}
		}
		if ctx.Err() != nil {
			return res, fmt.Errorf("shop: transaction: %w", err)
		}
		res.ambiguous = true // 5xx, timeout, reset: it may have landed; the token makes a retry safe
	}
	return res, fmt.Errorf("shop: transaction: gave up after %d attempts: %w", txAttempts, last)
}

func buildUpdate(table string, key map[string]types.AttributeValue, upd expression.UpdateBuilder, cond *expression.ConditionBuilder) types.TransactWriteItem {
	b := expression.NewBuilder().WithUpdate(upd)
	if cond != nil {
		b = b.WithCondition(*cond)
	}
	e, err := b.Build()
	if err != nil {
		panic(fmt.Sprintf("shop: building update expression: %v", err)) // static expressions: a bug
	}
	return types.TransactWriteItem{Update: &types.Update{
		TableName:                           aws.String(table),
		Key:                                 key,
		UpdateExpression:                    e.Update(),
		ConditionExpression:                 e.Condition(),
		ExpressionAttributeNames:            e.Names(),
		ExpressionAttributeValues:           e.Values(),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}}
}

func buildPut(table string, item map[string]types.AttributeValue, cond expression.ConditionBuilder) types.TransactWriteItem {
	e, err := expression.NewBuilder().WithCondition(cond).Build()
	if err != nil {
		panic(fmt.Sprintf("shop: building condition expression: %v", err))
	}
	return types.TransactWriteItem{Put: &types.Put{
		TableName:                           aws.String(table),
		Item:                                item,
		ConditionExpression:                 e.Condition(),
		ExpressionAttributeNames:            e.Names(),
		ExpressionAttributeValues:           e.Values(),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}}
}

func name(n string) expression.NameBuilder { return expression.Name(n) }

func value(v any) expression.ValueBuilder { return expression.Value(v) }

func scanInput(table string, e expression.Expression, start map[string]types.AttributeValue) *dynamodb.ScanInput {
	return &dynamodb.ScanInput{
		TableName:                 aws.String(table),
		FilterExpression:          e.Filter(),
		ExpressionAttributeNames:  e.Names(),
		ExpressionAttributeValues: e.Values(),
		ExclusiveStartKey:         start,
	}
}
