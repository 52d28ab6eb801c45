import { defineConfig } from 'vite';

// Built into ui/dist and embedded into the strata binary by crates/server/build.rs. Stable file
// names and no emptying of dist: builds from several cargo target dirs may run while another
// compiles `include_bytes!` of these files, which must never find a file missing.
export default defineConfig({
  base: '/',
  build: {
    outDir: 'dist',
    emptyOutDir: false,
    target: 'es2022',
    chunkSizeWarningLimit: 400,
    rollupOptions: {
      output: {
        entryFileNames: 'assets/[name].js',
        chunkFileNames: 'assets/[name].js',
        assetFileNames: 'assets/[name][extname]',
      },
    },
  },
  server: { proxy: { '/api': 'http://127.0.0.1:8080', '/module': 'http://127.0.0.1:8080' } },
});
