// The AWS SDK for JavaScript v3 on a casque serve FIFO queue (AWS JSON 1.0 protocol).
// Usage: node sqs_fifo_check.mjs ENDPOINT QUEUE_STEM   -> prints one JSON line of results, exit 0/1.
// Sends two groups interleaved (singles and a batch), one duplicate, then receives and deletes
// everything, recording each group's order; the SDK checks MD5OfBody itself.
import {
  SQSClient, CreateQueueCommand, SendMessageCommand, SendMessageBatchCommand, ReceiveMessageCommand,
  DeleteMessageCommand, GetQueueAttributesCommand, DeleteQueueCommand,
} from "@aws-sdk/client-sqs";

const [endpoint, stem] = process.argv.slice(2);
const sqs = new SQSClient({ endpoint, region: "us-east-1", credentials: { accessKeyId: "k", secretAccessKey: "s" }, maxAttempts: 1 });
const out = {};

try {
  const { QueueUrl } = await sqs.send(new CreateQueueCommand({ QueueName: `${stem}.fifo`, Attributes: { FifoQueue: "true" } }));
  const attrs = (await sqs.send(new GetQueueAttributesCommand({ QueueUrl, AttributeNames: ["All"] }))).Attributes;
  out.fifo = attrs.FifoQueue;
  const seqs = { a: [], b: [] };
  for (const g of ["a", "b"]) {
    const r = await sqs.send(new SendMessageCommand({ QueueUrl, MessageBody: `${g}0`, MessageGroupId: g, MessageDeduplicationId: `${g}0` }));
    seqs[g].push(r.SequenceNumber);
  }
  const batch = await sqs.send(new SendMessageBatchCommand({ QueueUrl, Entries: ["a", "b"].flatMap((g) => [1, 2].map((i) => (
    { Id: `${g}${i}`, MessageBody: `${g}${i}`, MessageGroupId: g, MessageDeduplicationId: `${g}${i}` }))) }));
  for (const e of batch.Successful) seqs[e.Id[0]].push(e.SequenceNumber);
  out.sequences_increase = ["a", "b"].every((g) => seqs[g].every((s, i) => i === 0 || BigInt(s) > BigInt(seqs[g][i - 1])));
  const dup = await sqs.send(new SendMessageCommand({ QueueUrl, MessageBody: "a0 again", MessageGroupId: "a", MessageDeduplicationId: "a0" }));
  out.duplicate_same_sequence = dup.SequenceNumber === seqs.a[0];
  try {
    await sqs.send(new SendMessageCommand({ QueueUrl, MessageBody: "x", MessageDeduplicationId: "x" }));
    out.err_no_group = "no error";
  } catch (e) { out.err_no_group = e.name; } // not a modelled shape: the SDK names it from x-amzn-query-error
  const order = { a: [], b: [] };
  for (let i = 0; i < 20 && order.a.length + order.b.length < 6; i++) {
    const r = await sqs.send(new ReceiveMessageCommand({ QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 5,
      MessageSystemAttributeNames: ["MessageGroupId", "SequenceNumber"] }));
    for (const m of r.Messages ?? []) {
      order[m.Attributes.MessageGroupId].push(m.Body);
      await sqs.send(new DeleteMessageCommand({ QueueUrl, ReceiptHandle: m.ReceiptHandle }));
    }
  }
  out.order = order;
  await sqs.send(new DeleteQueueCommand({ QueueUrl }));
  console.log(JSON.stringify(out));
} catch (e) {
  console.log(JSON.stringify({ ...out, fatal: `${e.name}: ${e.message}` }));
  process.exit(1);
}
