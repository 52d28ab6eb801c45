import { defineConfig } from 'vite';

// Built into ui/dist and embedded into the strata binary by crates/server/build.rs.
export default defineConfig({
  base: '/',
  build: { outDir: 'dist', emptyOutDir: true, target: 'es2022', chunkSizeWarningLimit: 400 },
  server: { proxy: { '/api': 'http://127.0.0.1:8080', '/module': 'http://127.0.0.1:8080' } },
});
