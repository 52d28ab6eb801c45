// A real CQL client for the observer's end-to-end test: Cassandra's own SimpleClient (the client
// its test suite uses), protocol v4, one request at a time on one connection.
//
// N timed requests, each selecting its id back: even ones as QUERY
// (SELECT key, (text)'OBSID<i>' FROM system.local), odd ones as EXECUTE of a prepared
// SELECT key, (text)? FROM system.local bound to OBSID<i>. Prints [i, latency_ns] per request.
//   java -cp 'lib/*:classes' Client PORT N

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.List;

import org.apache.cassandra.config.DatabaseDescriptor;
import org.apache.cassandra.db.ConsistencyLevel;
import org.apache.cassandra.transport.ProtocolVersion;
import org.apache.cassandra.transport.SimpleClient;
import org.apache.cassandra.transport.messages.ResultMessage;

public class Client {
    public static void main(String[] args) throws Exception {
        int port = Integer.parseInt(args[0]);
        int n = Integer.parseInt(args[1]);
        DatabaseDescriptor.clientInitialization();
        StringBuilder out = new StringBuilder();
        try (SimpleClient c = new SimpleClient("127.0.0.1", port, ProtocolVersion.V4)) {
            c.connect(false);
            ResultMessage.Prepared prepared = c.prepare("SELECT key, (text)? FROM system.local");
            // The first calls run in the interpreter; warm up (without an id) before timing.
            for (int i = 0; i < 500; i++) {
                c.execute("SELECT key, (text)'warmup' FROM system.local", ConsistencyLevel.ONE);
            }
            for (int i = 0; i < n; i++) {
                String id = "OBSID" + i;
                long t0 = System.nanoTime();
                ResultMessage r;
                if (i % 2 == 0) {
                    r = c.execute("SELECT key, (text)'" + id + "' FROM system.local", ConsistencyLevel.ONE);
                } else {
                    ByteBuffer v = ByteBuffer.wrap(id.getBytes(StandardCharsets.UTF_8));
                    r = c.executePrepared(prepared, List.of(v), ConsistencyLevel.ONE);
                }
                long t1 = System.nanoTime();
                ByteBuffer cell = ((ResultMessage.Rows) r).result.rows.get(0).get(1);
                String got = StandardCharsets.UTF_8.decode(cell.duplicate()).toString();
                if (!got.equals(id)) {
                    throw new IllegalStateException("asked for " + id + ", got " + got);
                }
                out.append('[').append(i).append(", ").append(t1 - t0).append("]\n");
            }
        }
        System.out.print(out);
        System.out.flush();
        // SimpleClient leaves non-daemon threads behind.
        System.exit(0);
    }
}
