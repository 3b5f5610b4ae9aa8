// The AWS SDK for JavaScript v3 signing against casque serve --auth sigv4 (AWS JSON 1.0 protocol):
// what it signs (host, x-amz-target, the body's hash, ...) must be what casque requires.
// Usage: AWS_ACCESS_KEY_ID=.. AWS_SECRET_ACCESS_KEY=.. node sigv4_check.mjs ENDPOINT QUEUE_NAME -> one JSON line.
import { SQSClient, CreateQueueCommand, SendMessageCommand, ReceiveMessageCommand, DeleteQueueCommand } from "@aws-sdk/client-sqs";

const [endpoint, name] = process.argv.slice(2);
const credentials = { accessKeyId: process.env.AWS_ACCESS_KEY_ID, secretAccessKey: process.env.AWS_SECRET_ACCESS_KEY };
const sqs = new SQSClient({ endpoint, region: "us-east-1", credentials, maxAttempts: 1 });
const out = {};
try {
  const { QueueUrl } = await sqs.send(new CreateQueueCommand({ QueueName: name }));
  await sqs.send(new SendMessageCommand({ QueueUrl, MessageBody: "signed by js" }));
  const r = await sqs.send(new ReceiveMessageCommand({ QueueUrl, WaitTimeSeconds: 5 }));
  out.body = r.Messages?.[0]?.Body;
  await sqs.send(new DeleteQueueCommand({ QueueUrl }));
  const bad = new SQSClient({ endpoint, region: "us-east-1", credentials: { ...credentials, secretAccessKey: "wrong" }, maxAttempts: 1 });
  try { await bad.send(new CreateQueueCommand({ QueueName: name })); out.wrong_secret = "accepted"; } catch (e) { out.wrong_secret = e.name; }
} catch (e) {
  out.fatal = `${e.name}: ${e.message}`;
}
console.log(JSON.stringify(out));
process.exit(out.fatal ? 1 : 0);
