// The AWS SDK for JavaScript v3 against a casque serve endpoint (AWS JSON 1.0 protocol).
// Usage: node sqs_check.mjs ENDPOINT QUEUE_NAME   -> prints one JSON line of results, exit 0/1.
// The SDK itself verifies MD5OfBody (send and receive): a wrong checksum throws.
import {
  SQSClient, CreateQueueCommand, GetQueueUrlCommand, SendMessageCommand, SendMessageBatchCommand,
  ReceiveMessageCommand, DeleteMessageCommand, DeleteMessageBatchCommand, ChangeMessageVisibilityCommand,
  GetQueueAttributesCommand, DeleteQueueCommand, QueueDoesNotExist, ReceiptHandleIsInvalid,
  TooManyEntriesInBatchRequest,
} from "@aws-sdk/client-sqs";

const [endpoint, name] = process.argv.slice(2);
const sqs = new SQSClient({ endpoint, region: "us-east-1", credentials: { accessKeyId: "k", secretAccessKey: "s" }, maxAttempts: 1 });
const out = {};

async function expectError(cls, fn) {
  try { await fn(); } catch (e) { return e instanceof cls ? e.name : `wrong class ${e.name}`; }
  return "no error";
}

try {
  const { QueueUrl } = await sqs.send(new CreateQueueCommand({ QueueName: name, Attributes: { VisibilityTimeout: "30" } }));
  out.url = (await sqs.send(new GetQueueUrlCommand({ QueueName: name }))).QueueUrl === QueueUrl;
  const attrs = { color: { DataType: "String", StringValue: "red" }, bin: { DataType: "Binary", BinaryValue: new Uint8Array([0, 1, 2, 255]) },
                  n: { DataType: "Number", StringValue: "42" } };
  const sent = await sqs.send(new SendMessageCommand({ QueueUrl, MessageBody: "héllo from js", MessageAttributes: attrs }));
  out.sent_md5_attrs = sent.MD5OfMessageAttributes;
  const batch = await sqs.send(new SendMessageBatchCommand({ QueueUrl, Entries: [{ Id: "a", MessageBody: "1" }, { Id: "b", MessageBody: "2" }] }));
  out.batch_ok = batch.Successful.length;
  const got = [];
  for (let i = 0; i < 10 && got.length < 3; i++) {
    const r = await sqs.send(new ReceiveMessageCommand({ QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 5,
      MessageAttributeNames: ["All"], MessageSystemAttributeNames: ["All"] }));
    got.push(...(r.Messages ?? []));
  }
  out.received = got.length;
  const hello = got.find((m) => m.Body === "héllo from js");
  out.attrs_back = hello && hello.MessageAttributes.color.StringValue === "red" && Buffer.from(hello.MessageAttributes.bin.BinaryValue).equals(Buffer.from([0, 1, 2, 255]));
  out.md5_attrs_match = hello && hello.MD5OfMessageAttributes === sent.MD5OfMessageAttributes;
  out.receive_count = hello && hello.Attributes.ApproximateReceiveCount;
  await sqs.send(new ChangeMessageVisibilityCommand({ QueueUrl, ReceiptHandle: got[0].ReceiptHandle, VisibilityTimeout: 60 }));
  await sqs.send(new DeleteMessageCommand({ QueueUrl, ReceiptHandle: got[0].ReceiptHandle }));
  const del = await sqs.send(new DeleteMessageBatchCommand({ QueueUrl, Entries: got.slice(1).map((m, i) => ({ Id: `d${i}`, ReceiptHandle: m.ReceiptHandle })) }));
  out.batch_deleted = del.Successful.length;
  const a = await sqs.send(new GetQueueAttributesCommand({ QueueUrl, AttributeNames: ["All"] }));
  out.left = Number(a.Attributes.ApproximateNumberOfMessages) + Number(a.Attributes.ApproximateNumberOfMessagesNotVisible);
  out.err_missing_queue = await expectError(QueueDoesNotExist, () => sqs.send(new GetQueueUrlCommand({ QueueName: name + "-nope" })));
  out.err_receipt = await expectError(ReceiptHandleIsInvalid, () => sqs.send(new DeleteMessageCommand({ QueueUrl, ReceiptHandle: "forged" })));
  out.err_batch = await expectError(TooManyEntriesInBatchRequest, () => sqs.send(new SendMessageBatchCommand({ QueueUrl,
    Entries: Array.from({ length: 11 }, (_, i) => ({ Id: `e${i}`, MessageBody: "x" })) })));
  await sqs.send(new DeleteQueueCommand({ QueueUrl }));
  console.log(JSON.stringify(out));
} catch (e) {
  console.log(JSON.stringify({ ...out, fatal: `${e.name}: ${e.message}` }));
  process.exit(1);
}
