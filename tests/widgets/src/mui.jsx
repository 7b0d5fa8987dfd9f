// React 19 + MUI: controlled text and number fields, a Select (menu in a portal, opened and
// closed with transitions), an Autocomplete (filtering listbox) and a Dialog.
import { useState } from 'react';
import { createRoot } from 'react-dom/client';
import Autocomplete from '@mui/material/Autocomplete';
import Button from '@mui/material/Button';
import Dialog from '@mui/material/Dialog';
import DialogActions from '@mui/material/DialogActions';
import DialogContent from '@mui/material/DialogContent';
import DialogTitle from '@mui/material/DialogTitle';
import FormControl from '@mui/material/FormControl';
import InputLabel from '@mui/material/InputLabel';
import MenuItem from '@mui/material/MenuItem';
import Select from '@mui/material/Select';
import Stack from '@mui/material/Stack';
import TextField from '@mui/material/TextField';
import { report } from './report.js';

const COUNTRIES = ['Poland', 'Portugal', 'Romania', 'Spain', 'Sweden', 'Switzerland'];

function App() {
  const [name, setName] = useState('');
  const [quantity, setQuantity] = useState('1');
  const [shipping, setShipping] = useState('standard');
  const [country, setCountry] = useState(null);
  const [open, setOpen] = useState(false);
  const [saved, setSaved] = useState('');
  const place = async () => {
    const answer = await report('mui', { name, quantity, shipping, country });
    setOpen(false);
    setSaved(answer);
  };
  return (
    <Stack spacing={2} sx={{ maxWidth: 420, m: 2 }}>
      <h1>Order form</h1>
      <TextField label="Full name" value={name} onChange={(e) => setName(e.target.value)} />
      <TextField
        label="Quantity (kg)"
        type="number"
        value={quantity}
        onChange={(e) => setQuantity(e.target.value)}
      />
      <FormControl>
        <InputLabel id="shipping-label">Shipping</InputLabel>
        <Select
          labelId="shipping-label"
          label="Shipping"
          value={shipping}
          onChange={(e) => setShipping(e.target.value)}
        >
          <MenuItem value="standard">Standard shipping</MenuItem>
          <MenuItem value="express">Express shipping</MenuItem>
          <MenuItem value="overnight">Overnight shipping</MenuItem>
        </Select>
      </FormControl>
      <Autocomplete
        options={COUNTRIES}
        value={country}
        onChange={(_, value) => setCountry(value)}
        renderInput={(params) => <TextField {...params} label="Country" />}
      />
      <Button variant="contained" onClick={() => setOpen(true)}>
        Review order
      </Button>
      {saved && <p>Order placed: {saved}</p>}
      <Dialog open={open} onClose={() => setOpen(false)}>
        <DialogTitle>Confirm the order</DialogTitle>
        <DialogContent>
          {quantity} kg for {name || 'nobody'}, {shipping} shipping to {country || 'nowhere'}.
        </DialogContent>
        <DialogActions>
          <Button onClick={() => setOpen(false)}>Cancel</Button>
          <Button variant="contained" onClick={place}>
            Place order
          </Button>
        </DialogActions>
      </Dialog>
    </Stack>
  );
}

createRoot(document.getElementById('root')).render(<App />);
