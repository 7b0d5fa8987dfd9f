// Quill: a contenteditable rich-text editor with its own model of the text.
import 'quill/dist/quill.snow.css';
import Quill from 'quill';
import { report } from './report.js';

const quill = new Quill('#editor', { theme: 'snow', placeholder: 'Write the note here' });
document.getElementById('save').addEventListener('click', async () => {
  const value = { text: quill.getText().trim() };
  document.getElementById('saved').textContent = 'Saved: ' + (await report('quill', value));
});
