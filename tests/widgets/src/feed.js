// An IntersectionObserver feed: when the sentinel under the last post comes into view, the
// next page of posts is fetched and appended.
import { report } from './report.js';

const list = document.getElementById('posts');
const sentinel = document.getElementById('sentinel');
let page = 0;
let loading = false;
async function more() {
  if (loading || page >= 6) return;
  loading = true;
  const res = await fetch('/api/feed?page=' + page);
  const posts = await res.json();
  for (const post of posts) {
    const item = document.createElement('article');
    item.style.cssText = 'height: 300px; border-bottom: 1px solid #ccc';
    const title = document.createElement('h2');
    title.textContent = post.title;
    const like = document.createElement('button');
    like.textContent = 'Like ' + post.title;
    like.addEventListener('click', async () => {
      document.getElementById('saved').textContent = 'Liked: ' + (await report('feed', { post: post.id }));
    });
    item.append(title, like);
    list.appendChild(item);
  }
  page += 1;
  loading = false;
}
new IntersectionObserver((entries) => {
  if (entries.some((e) => e.isIntersecting)) more();
}).observe(sentinel);
