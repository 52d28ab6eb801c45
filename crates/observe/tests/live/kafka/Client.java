// A real Kafka client for the observer's end-to-end test, built on Kafka's own client library.
//
// Timed part: N Metadata requests (the client library's encoding, latest version, one at a time
// on one connection) about a topic named OBSID<i> that does not exist; the broker's answer names
// the topic, so each response carries the id of its request. The client library's producer and
// admin client run their requests on their own threads, whose hand-offs would be the client's
// delay, not the wire's: the timed requests are written and read on the calling thread.
// Then P records are sent to the topic "observed" by the library's producer, each waited for.
//
// Prints [i, latency_ns] per timed request and a last line "produced P".
//   java -cp 'lib/*:classes' Client PORT N P

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.protocol.ApiKeys;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.requests.AbstractResponse;
import org.apache.kafka.common.requests.MetadataRequest;
import org.apache.kafka.common.requests.MetadataResponse;
import org.apache.kafka.common.requests.RequestHeader;
import org.apache.kafka.common.serialization.StringSerializer;

public class Client {
    public static void main(String[] args) throws Exception {
        int port = Integer.parseInt(args[0]);
        int n = Integer.parseInt(args[1]);
        int produce = Integer.parseInt(args[2]);
        StringBuilder out = new StringBuilder();
        try (Socket s = new Socket("127.0.0.1", port)) {
            s.setTcpNoDelay(true);
            DataOutputStream tx = new DataOutputStream(new BufferedOutputStream(s.getOutputStream()));
            DataInputStream rx = new DataInputStream(new BufferedInputStream(s.getInputStream()));
            // The first calls run in the interpreter; warm up (without an id) before timing.
            for (int i = 0; i < 2000; i++) {
                metadata(tx, rx, "warmup" + i, -1 - i);
            }
            for (int i = 0; i < n; i++) {
                long ns = metadata(tx, rx, "OBSID" + i, i);
                out.append('[').append(i).append(", ").append(ns).append("]\n");
            }
        }
        String bootstrap = "127.0.0.1:" + port;
        Properties a = new Properties();
        a.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(a)) {
            try {
                admin.createTopics(List.of(new NewTopic("observed", 1, (short) 1))).all().get();
            } catch (ExecutionException e) {
                // An earlier run against the same broker made it.
                if (!(e.getCause() instanceof TopicExistsException)) {
                    throw e;
                }
            }
        }
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.put("linger.ms", "0");
        p.put("acks", "1");
        p.put("enable.idempotence", "false");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < produce; i++) {
                producer.send(new ProducerRecord<>("observed", "record " + i)).get();
            }
        }
        out.append("produced ").append(produce).append('\n');
        System.out.print(out);
    }

    /**
     * One Metadata request for a topic that does not exist, and its answer, which must name it;
     * the time from writing the request to having read the answer's last byte, in ns.
     */
    static long metadata(DataOutputStream tx, DataInputStream rx, String topic, int correlation)
            throws Exception {
        short version = ApiKeys.METADATA.latestVersion();
        MetadataRequest req = new MetadataRequest.Builder(List.of(topic), false).build(version);
        RequestHeader header = new RequestHeader(ApiKeys.METADATA, version, "observe-test", correlation);
        ByteBuffer b = req.serializeWithHeader(header);
        long t0 = System.nanoTime();
        tx.writeInt(b.remaining());
        tx.write(b.array(), b.arrayOffset() + b.position(), b.remaining());
        tx.flush();
        byte[] body = new byte[rx.readInt()];
        rx.readFully(body);
        long t1 = System.nanoTime();
        MetadataResponse resp =
                (MetadataResponse) AbstractResponse.parseResponse(ByteBuffer.wrap(body), header);
        if (resp.errors().get(topic) != Errors.UNKNOWN_TOPIC_OR_PARTITION) {
            throw new IllegalStateException("metadata for " + topic + ": " + resp.errors());
        }
        return t1 - t0;
    }
}
