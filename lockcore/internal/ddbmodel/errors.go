package ddbmodel

import (
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

// Errors are the SDK's own types, so that callers classify them exactly as they
// classify the engine's: *types.ConditionalCheckFailedException,
// *types.TransactionCanceledException, *types.ResourceNotFoundException, and a
// *smithy.GenericAPIError with code "ValidationException" (the SDK has no type of its
// own for it). Each is wrapped in a *smithy.OperationError naming the operation, as the
// SDK wraps what the service returns.

const msgConditionFailed = "The conditional request failed"

// MsgItemTooLarge and MsgUpdateTooLarge are the messages of the ValidationException for
// a write that would make an item larger than 400 KB (PutItem and UpdateItem).
const (
	MsgItemTooLarge   = "Item size has exceeded the maximum allowed size"
	MsgUpdateTooLarge = "Item size to update has exceeded the maximum allowed size"
)

func validation(msg string) error {
	return &smithy.GenericAPIError{Code: "ValidationException", Message: msg, Fault: smithy.FaultClient}
}

func validationf(format string, args ...any) error { return validation(fmt.Sprintf(format, args...)) }

func conditionFailed(old Item, rv types.ReturnValuesOnConditionCheckFailure) error {
	e := &types.ConditionalCheckFailedException{Message: aws.String(msgConditionFailed)}
	if rv == types.ReturnValuesOnConditionCheckFailureAllOld && old != nil {
		e.Item = cloneItem(old)
	}
	return e
}

func notFound() error {
	return &types.ResourceNotFoundException{Message: aws.String("Cannot do operations on a non-existent table")}
}

func cancelled(reasons []types.CancellationReason) error {
	codes := make([]string, len(reasons))
	for i, r := range reasons {
		codes[i] = aws.ToString(r.Code)
	}
	return &types.TransactionCanceledException{
		Message:             aws.String("Transaction cancelled, please refer cancellation reasons for specific reasons [" + strings.Join(codes, ", ") + "]"),
		CancellationReasons: reasons,
	}
}

func opError(op string, err error) error {
	if err == nil {
		return nil
	}
	return &smithy.OperationError{ServiceID: "DynamoDB", OperationName: op, Err: err}
}
