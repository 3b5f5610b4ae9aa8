// The AWS SDK for Java v2 against a casque serve endpoint (AWS JSON 1.0 protocol, which current SDK versions speak).
// Usage: java -cp ... SqsCheck ENDPOINT QUEUE_NAME   -> prints one JSON line of results, exit 0/1.
// The SDK itself verifies MD5OfMessageBody and MD5OfMessageAttributes on send and receive: a wrong checksum throws.
import java.net.URI;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.stream.Collectors;
import java.util.stream.IntStream;

import software.amazon.awssdk.auth.credentials.AwsBasicCredentials;
import software.amazon.awssdk.auth.credentials.StaticCredentialsProvider;
import software.amazon.awssdk.core.SdkBytes;
import software.amazon.awssdk.http.urlconnection.UrlConnectionHttpClient;
import software.amazon.awssdk.regions.Region;
import software.amazon.awssdk.services.sqs.SqsClient;
import software.amazon.awssdk.services.sqs.model.*;

public final class SqsCheck {
    private static final Map<String, Object> OUT = new LinkedHashMap<>();

    public static void main(String[] args) {
        String endpoint = args[0], name = args[1];
        try (SqsClient sqs = SqsClient.builder()
                .endpointOverride(URI.create(endpoint))
                .region(Region.US_EAST_1)
                .credentialsProvider(StaticCredentialsProvider.create(AwsBasicCredentials.create("k", "s")))
                .httpClientBuilder(UrlConnectionHttpClient.builder())
                .overrideConfiguration(c -> c.retryStrategy(r -> r.maxAttempts(1)))
                .build()) {
            run(sqs, name);
            System.out.println(json(OUT));
        } catch (Exception e) {
            OUT.put("fatal", e.getClass().getSimpleName() + ": " + e.getMessage());
            System.out.println(json(OUT));
            System.exit(1);
        }
    }

    private static void run(SqsClient sqs, String name) {
        String url = sqs.createQueue(b -> b.queueName(name).attributes(Map.of(QueueAttributeName.VISIBILITY_TIMEOUT, "30"))).queueUrl();
        OUT.put("url", sqs.getQueueUrl(b -> b.queueName(name)).queueUrl().equals(url));
        Map<String, MessageAttributeValue> attrs = Map.of(
                "color", MessageAttributeValue.builder().dataType("String").stringValue("red").build(),
                "bin", MessageAttributeValue.builder().dataType("Binary")
                        .binaryValue(SdkBytes.fromByteArray(new byte[]{0, 1, 2, (byte) 255})).build(),
                "n", MessageAttributeValue.builder().dataType("Number").stringValue("42").build());
        SendMessageResponse sent = sqs.sendMessage(b -> b.queueUrl(url).messageBody("héllo from java").messageAttributes(attrs));
        SendMessageBatchResponse batch = sqs.sendMessageBatch(b -> b.queueUrl(url).entries(
                SendMessageBatchRequestEntry.builder().id("a").messageBody("1").build(),
                SendMessageBatchRequestEntry.builder().id("b").messageBody("2").delaySeconds(0).build()));
        OUT.put("batch_ok", batch.successful().size());
        List<Message> got = new ArrayList<>();
        for (int i = 0; i < 10 && got.size() < 3; i++) {
            got.addAll(sqs.receiveMessage(b -> b.queueUrl(url).maxNumberOfMessages(10).waitTimeSeconds(5)
                    .messageAttributeNames("All").messageSystemAttributeNames(MessageSystemAttributeName.ALL)).messages());
        }
        OUT.put("received", got.size());
        Message hello = got.stream().filter(m -> m.body().equals("héllo from java")).findFirst().orElseThrow();
        OUT.put("attrs_back", hello.messageAttributes().get("color").stringValue().equals("red")
                && hello.messageAttributes().get("bin").binaryValue().asByteArray().length == 4
                && hello.messageAttributes().get("bin").binaryValue().asByteArray()[3] == (byte) 255);
        OUT.put("md5_attrs_match", hello.md5OfMessageAttributes().equals(sent.md5OfMessageAttributes()));
        OUT.put("receive_count", hello.attributes().get(MessageSystemAttributeName.APPROXIMATE_RECEIVE_COUNT));
        sqs.changeMessageVisibility(b -> b.queueUrl(url).receiptHandle(got.get(0).receiptHandle()).visibilityTimeout(60));
        sqs.deleteMessage(b -> b.queueUrl(url).receiptHandle(got.get(0).receiptHandle()));
        List<DeleteMessageBatchRequestEntry> rest = IntStream.range(1, got.size())
                .mapToObj(i -> DeleteMessageBatchRequestEntry.builder().id("d" + i).receiptHandle(got.get(i).receiptHandle()).build())
                .collect(Collectors.toList());
        OUT.put("batch_deleted", sqs.deleteMessageBatch(b -> b.queueUrl(url).entries(rest)).successful().size());
        Map<String, String> a = sqs.getQueueAttributes(b -> b.queueUrl(url).attributeNames(QueueAttributeName.ALL)).attributesAsStrings();
        OUT.put("visibility_timeout", a.get("VisibilityTimeout"));
        OUT.put("left", Integer.parseInt(a.get("ApproximateNumberOfMessages")) + Integer.parseInt(a.get("ApproximateNumberOfMessagesNotVisible")));
        OUT.put("err_missing_queue", expectError(QueueDoesNotExistException.class, () -> sqs.getQueueUrl(b -> b.queueName(name + "-nope"))));
        OUT.put("err_receipt", expectError(ReceiptHandleIsInvalidException.class,
                () -> sqs.deleteMessage(b -> b.queueUrl(url).receiptHandle("forged"))));
        List<SendMessageBatchRequestEntry> eleven = IntStream.range(0, 11)
                .mapToObj(i -> SendMessageBatchRequestEntry.builder().id("e" + i).messageBody("x").build()).collect(Collectors.toList());
        OUT.put("err_batch", expectError(TooManyEntriesInBatchRequestException.class,
                () -> sqs.sendMessageBatch(b -> b.queueUrl(url).entries(eleven))));
        sqs.deleteQueue(b -> b.queueUrl(url));
        OUT.put("err_deleted_queue", expectError(QueueDoesNotExistException.class, () -> sqs.getQueueAttributes(b -> b.queueUrl(url))));
        fifo(sqs, name);
    }

    /** A FIFO queue: two groups sent interleaved, received in order per group; SequenceNumber increases; a duplicate is one message. */
    private static void fifo(SqsClient sqs, String name) {
        String url = sqs.createQueue(b -> b.queueName(name + ".fifo").attributes(Map.of(QueueAttributeName.FIFO_QUEUE, "true"))).queueUrl();
        Map<String, List<String>> sequences = new LinkedHashMap<>(Map.of("a", new ArrayList<>(), "b", new ArrayList<>()));
        for (int i = 0; i < 3; i++) {
            for (String g : List.of("a", "b")) {
                String body = g + i;
                sequences.get(g).add(sqs.sendMessage(b -> b.queueUrl(url).messageBody(body).messageGroupId(g).messageDeduplicationId(body))
                        .sequenceNumber());
            }
        }
        OUT.put("fifo_sequences_increase", sequences.values().stream().allMatch(seqs -> IntStream.range(1, seqs.size())
                .allMatch(i -> new java.math.BigInteger(seqs.get(i)).compareTo(new java.math.BigInteger(seqs.get(i - 1))) > 0)));
        String again = sqs.sendMessage(b -> b.queueUrl(url).messageBody("a0 again").messageGroupId("a").messageDeduplicationId("a0")).sequenceNumber();
        OUT.put("fifo_duplicate_same_sequence", again.equals(sequences.get("a").get(0)));
        Map<String, List<String>> order = new LinkedHashMap<>(Map.of("a", new ArrayList<>(), "b", new ArrayList<>()));
        for (int i = 0; i < 20 && order.get("a").size() + order.get("b").size() < 6; i++) {
            for (Message m : sqs.receiveMessage(b -> b.queueUrl(url).maxNumberOfMessages(10).waitTimeSeconds(5)
                    .messageSystemAttributeNames(MessageSystemAttributeName.MESSAGE_GROUP_ID)).messages()) {
                order.get(m.attributes().get(MessageSystemAttributeName.MESSAGE_GROUP_ID)).add(m.body());
                sqs.deleteMessage(b -> b.queueUrl(url).receiptHandle(m.receiptHandle()));
            }
        }
        OUT.put("fifo_order", String.join(",", order.get("a")) + "|" + String.join(",", order.get("b")));
        sqs.deleteQueue(b -> b.queueUrl(url));
    }

    /** The simple name of the exception class if the call threw {@code expected}, else what happened instead. */
    private static String expectError(Class<? extends SqsException> expected, Callable<?> call) {
        try {
            call.call();
            return "no error";
        } catch (Exception e) {
            return expected.isInstance(e) ? expected.getSimpleName() : "wrong class " + e.getClass().getSimpleName() + ": " + e.getMessage();
        }
    }

    private static String json(Map<String, Object> map) {
        return map.entrySet().stream().map(e -> quote(e.getKey()) + ":" + (e.getValue() instanceof String s ? quote(s) : e.getValue()))
                .collect(Collectors.joining(",", "{", "}"));
    }

    private static String quote(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n") + "\"";
    }
}
