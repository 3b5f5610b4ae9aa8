// The AWS SDK for Go v2 against a casque serve endpoint (AWS JSON 1.0 protocol, which current SDK versions speak).
// Usage: sqscheck ENDPOINT QUEUE_NAME [shape]  -> prints one JSON line of results, exit 0/1 ("shape": shape.go's check).
// The SDK itself verifies MD5OfMessageBody and MD5OfMessageAttributes on send and receive: a wrong checksum fails the call.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

type result map[string]any

func main() {
	endpoint, name := os.Args[1], os.Args[2]
	check := run
	if len(os.Args) > 3 && os.Args[3] == "shape" {
		check = shape
	}
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion("us-east-1"), config.WithRetryMaxAttempts(1),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("k", "s", "")))
	out := result{}
	if err == nil {
		client := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(endpoint) })
		err = check(ctx, client, name, out)
	}
	if err != nil {
		out["fatal"] = err.Error()
	}
	line, _ := json.Marshal(out)
	fmt.Println(string(line))
	if err != nil {
		os.Exit(1)
	}
}

func run(ctx context.Context, c *sqs.Client, name string, out result) error {
	created, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: map[string]string{"VisibilityTimeout": "30"}})
	if err != nil {
		return err
	}
	url := created.QueueUrl
	got, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
	if err != nil {
		return err
	}
	out["url"] = *got.QueueUrl == *url
	attrs := map[string]types.MessageAttributeValue{
		"color": {DataType: aws.String("String"), StringValue: aws.String("red")},
		"bin":   {DataType: aws.String("Binary"), BinaryValue: []byte{0, 1, 2, 255}},
		"n":     {DataType: aws.String("Number"), StringValue: aws.String("42")},
	}
	sent, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: url, MessageBody: aws.String("héllo from go"), MessageAttributes: attrs})
	if err != nil {
		return err
	}
	batch, err := c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: url, Entries: []types.SendMessageBatchRequestEntry{
		{Id: aws.String("a"), MessageBody: aws.String("1")}, {Id: aws.String("b"), MessageBody: aws.String("2")}}})
	if err != nil {
		return err
	}
	out["batch_ok"] = len(batch.Successful)
	var msgs []types.Message
	for i := 0; i < 10 && len(msgs) < 3; i++ {
		r, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: url, MaxNumberOfMessages: 10, WaitTimeSeconds: 5,
			MessageAttributeNames: []string{"All"}, MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
		if err != nil {
			return err
		}
		msgs = append(msgs, r.Messages...)
	}
	out["received"] = len(msgs)
	for _, m := range msgs {
		if *m.Body == "héllo from go" {
			out["attrs_back"] = *m.MessageAttributes["color"].StringValue == "red" && bytes.Equal(m.MessageAttributes["bin"].BinaryValue, []byte{0, 1, 2, 255})
			out["md5_attrs_match"] = *m.MD5OfMessageAttributes == *sent.MD5OfMessageAttributes
			out["receive_count"] = m.Attributes["ApproximateReceiveCount"]
		}
	}
	if len(msgs) == 0 {
		return errors.New("nothing received")
	}
	change := &sqs.ChangeMessageVisibilityInput{QueueUrl: url, ReceiptHandle: msgs[0].ReceiptHandle, VisibilityTimeout: 60}
	if _, err := c.ChangeMessageVisibility(ctx, change); err != nil {
		return err
	}
	if _, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: url, ReceiptHandle: msgs[0].ReceiptHandle}); err != nil {
		return err
	}
	var entries []types.DeleteMessageBatchRequestEntry
	for i, m := range msgs[1:] {
		entries = append(entries, types.DeleteMessageBatchRequestEntry{Id: aws.String("d" + strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
	}
	deleted, err := c.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: url, Entries: entries})
	if err != nil {
		return err
	}
	out["batch_deleted"] = len(deleted.Successful)
	qa, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: url,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
	if err != nil {
		return err
	}
	visible, _ := strconv.Atoi(qa.Attributes["ApproximateNumberOfMessages"])
	hidden, _ := strconv.Atoi(qa.Attributes["ApproximateNumberOfMessagesNotVisible"])
	out["visibility_timeout"] = qa.Attributes["VisibilityTimeout"]
	out["left"] = visible + hidden
	_, err = c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name + "-nope")})
	out["err_missing_queue"] = errorName[*types.QueueDoesNotExist](err)
	_, err = c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: url, ReceiptHandle: aws.String("forged")})
	out["err_receipt"] = errorName[*types.ReceiptHandleIsInvalid](err)
	var eleven []types.SendMessageBatchRequestEntry
	for i := 0; i < 11; i++ {
		eleven = append(eleven, types.SendMessageBatchRequestEntry{Id: aws.String("e" + strconv.Itoa(i)), MessageBody: aws.String("x")})
	}
	_, err = c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: url, Entries: eleven})
	out["err_batch"] = errorName[*types.TooManyEntriesInBatchRequest](err)
	if _, err := c.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: url}); err != nil {
		return err
	}
	_, err = c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: url})
	out["err_deleted_queue"] = errorName[*types.QueueDoesNotExist](err)
	return nil
}

// errorName is the SDK's error code when err is of the modeled type T, else a description of what happened instead.
func errorName[T interface {
	error
	ErrorCode() string
}](err error) string {
	var typed T
	if err == nil {
		return "no error"
	}
	if errors.As(err, &typed) {
		return typed.ErrorCode()
	}
	return "wrong type: " + err.Error()
}
